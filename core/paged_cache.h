// Page-structure checks of a paged cache (spec "Serialized cache values") that need no
// runtime: shared by persistent-state validation (state/value_validation.cc) and GraphBuilder
// (paged_cache_initializer). Conversion to and from PagedCacheProto is in runtime_value.h.
#pragma once

#include <functional>
#include <string>

#include "core/runtime_value.h"

namespace onnx_light {
class EncodedValueProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

// Errors read "<what> '<path>': <problem>" with code kInvalidArgument, where `what` says whose
// value it is ("persistent value", "paged_cache_initializer").
// (The concrete dims of an encoded value are EncodedLogicalDims, core/affine_encoding.h.)

// Called for each page payload (path "<path>.blocks[i].key"/".value") before its geometry is
// read, for the checks the caller owns (encoded parameters, storage owners).
using PagePayloadCheck = std::function<void(const std::string& path, const RuntimeValue& page)>;

// One block's own rules: INT64 scalar start and length, a positive length no greater than
// the page capacity, rank-4 dense FLOAT/FLOAT16/BFLOAT16 or encoded payloads, equal K/V
// capacity, batch and heads. `check_payload` (if set) sees each payload first, as
// "<payload_path>.key"/".value". Errors read "<where>: <problem>" (kInvalidArgument).
// Shared by the whole-cache check below and the ai.rt kernels' page reader.
struct PagedBlockGeometry {
  int64_t start = 0, length = 0;
  Shape key, value;  // [batch, heads, capacity, width]
};
PagedBlockGeometry CheckPagedCacheBlock(const std::string& where, const RuntimeValue& block,
                                        const PagePayloadCheck& check_payload = {},
                                        const std::string& payload_path = {});

// Checks a value with the paged-cache structure (IsPagedCacheStructure): INT64 scalar start
// and length, starts contiguous from zero, positive lengths no greater than the page capacity,
// dense FLOAT/FLOAT16/BFLOAT16 or encoded rank-4 [batch, heads, capacity, width] payloads with
// concrete dims, equal K/V capacity, batch and heads per block, and widths and heads consistent
// across blocks. Decodes nothing.
void CheckPagedCachePages(const std::string& what, const std::string& path,
                          const RuntimeValue& cache, const PagePayloadCheck& check_payload = {});

// A storage type pages are written in: FLOAT, FLOAT16, BFLOAT16, or an affine code of at most
// 8 bits (INT8, UINT8, INT4, UINT4, INT2, UINT2).
bool IsPageStorageType(DataType t);

}  // namespace onnx_light::core::runtime
