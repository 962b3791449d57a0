// One block of a paged cache read and checked without decoding: its range and its key and
// value payload views. The cache-level rules (contiguous starts, widths consistent with the
// other blocks or with the inputs) belong to the callers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ops/ai_rt/page_view.h"

namespace onnx_light::ops::ai_rt {

struct CachePage {
  int64_t start = 0, length = 0;
  PageView key, value;
};

// Reads `block` ({start, length: INT64 scalars; key, value: payloads}) after the per-block
// rules of core::runtime::CheckPagedCacheBlock (the state's and GraphBuilder's checks too).
// Throws kInvalidArgument "<where>...: ..." naming the field.
CachePage ReadCachePage(const RuntimeValue& block, const std::string& where);

// The blocks of a paged cache as the shared handles its sequence holds, in order. Throws
// kInvalidArgument "<where>: ..." unless `cache` has the paged-cache structure; with
// `check_blocks` false the blocks' fields are left to the caller (who must check every block
// it has not read before with core::runtime::IsPagedCacheBlock, and RefusePagedCache).
std::vector<std::shared_ptr<const RuntimeValue>> CacheBlocks(const RuntimeValue& cache,
                                                             const std::string& where,
                                                             bool check_blocks = true);
// Throws CacheBlocks' kInvalidArgument for `cache`.
[[noreturn]] void RefusePagedCache(const RuntimeValue& cache, const std::string& where);

// The paged cache with `blocks` in place of `cache`'s (struct name and element type kept).
RuntimeValue WithBlocks(const RuntimeValue& cache, core::runtime::RuntimeSequence blocks);

// A block value {start, length, key, value}.
RuntimeValue MakeBlock(int64_t start, int64_t length, RuntimeValue key, RuntimeValue value);

}  // namespace onnx_light::ops::ai_rt
