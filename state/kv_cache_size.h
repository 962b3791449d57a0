// The bytes one cached token takes in a model's persistent caches, read from their
// declarations: RequestScheduler converts a KV budget in bytes (SchedulerOptions::
// max_kv_bytes) to each request's tokens with it.
#pragma once

#include <cstdint>
#include <string>

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core::runtime {

struct KvPageStorage;  // executor/runtime_context.h

// Bytes per cached token of one batch row, summed over the bound inputs (K and V caches
// bound apart count apart), or why the declarations do not give it (`bytes` then 0):
// - a tensor cache, e.g. [batch, kv_heads, past, head_size]: dim 0 is the batch, exactly one
//   other dim is symbolic (the growing sequence); the others' product x element size;
// - a paged cache (a struct, or a sequence of them: row caches) whose declaration lists its
//   block fields: key and value [batch, heads, capacity, width] with concrete heads and
//   width, heads x width x element size each (the declared type), or, with `storage`, the
//   storage types the pages are written in (rounded up to whole bytes per token). A
//   layout-less paged cache declares no sizes.
// A paged cache takes whole pages: `page_tokens` is the tokens one page holds, the
// block_size of the model's ai.rt::PagedAttention nodes (default 16; the least common
// multiple when they differ), and 1 for tensor caches or without such a node.
struct KvTokenBytes {
  int64_t bytes = 0;
  std::string why_not;
  int64_t page_tokens = 1;
};
KvTokenBytes KvBytesPerToken(const ModelProto& model, const KvPageStorage* storage = nullptr);

}  // namespace onnx_light::core::runtime
