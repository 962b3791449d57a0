// Writing a present KV cache = concat(past, new rows) along the sequence axis, shared by the
// attention kernels (ONNX Attention, com.microsoft GroupQueryAttention). When the node
// directly consumes the bound past and produces the bound present of a persistent state, the
// state's append reservation supplies a buffer that already holds the prefix and only the
// new rows are copied (a decode step never copies the cache); otherwise the present is a
// fresh dense tensor. Storage reports (kPersistentStorage events) count what was copied.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "executor/kernel.h"

namespace onnx_light::ops::math {

// The new rows: element (b, h, s, 0) is at data + b*batch_stride + h*head_stride +
// s*seq_stride (elements of `type`), head_size contiguous elements each.
struct KvRows {
  const void* data = nullptr;
  core::DataType type = core::DataType::kFloat;
  int64_t batch = 0, heads = 0, seq = 0, head_size = 0;
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;
  int64_t Offset(int64_t b, int64_t h, int64_t s) const {
    return b * batch_stride + h * head_stride + s * seq_stride;
  }
};

// Sets output `output` to [batch, heads, past_len + seq, head_size] in `rows.type`: past
// (input `past_input`, dense from axis 2 or null) followed by `rows`. Returns the present
// (a handle on the output; a strided view when it is an append reservation).
core::runtime::Tensor WritePresentKv(core::runtime::KernelCall& call, size_t output,
                                     size_t past_input, const core::runtime::Tensor* past,
                                     const KvRows& rows);

}  // namespace onnx_light::ops::math
