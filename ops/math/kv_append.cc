#include "ops/math/kv_append.h"

#include <cstring>

#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops::math {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

// The prefix is copied as bits (no conversion of 16-bit caches). `past` is dense from axis 2
// (a block of a strided cache is contiguous).
Tensor WritePresentKv(KernelCall& call, size_t output, size_t past_input, const Tensor* past,
                      const KvRows& rows) {
  const int64_t past_len = past ? past->dim(2) : 0;
  const int64_t total = past_len + rows.seq;
  const Shape shape{rows.batch, rows.heads, total, rows.head_size};
  const size_t elem = core::StorageBytes(rows.type, 1);
  const size_t row_bytes = static_cast<size_t>(rows.head_size) * elem;
  auto copy_new_rows = [&](int64_t b, int64_t h, uint8_t* out) {
    if (row_bytes == 0) return;  // zero-width rows: nothing to copy (and no data pointer)
    for (int64_t s = 0; s < rows.seq; ++s, out += row_bytes)
      std::memcpy(
          out,
          static_cast<const uint8_t*>(rows.data) + static_cast<size_t>(rows.Offset(b, h, s)) * elem,
          row_bytes);
  };
  const size_t append_bytes = static_cast<size_t>(rows.batch * rows.heads * rows.seq) * row_bytes;
  if (past != nullptr && call.has_context()) {
    const auto& context = call.context();
    if (auto reservation = context.ReservePersistentAppend(call, shape, 2, past_input, output)) {
      for (int64_t b = 0; b < rows.batch; ++b)
        for (int64_t h = 0; h < rows.heads; ++h)
          copy_new_rows(b, h,
                        reinterpret_cast<uint8_t*>(
                            reservation->block(static_cast<size_t>(b * rows.heads + h)).data()));
      Tensor present = context.CommitPersistentAppend(call, std::move(*reservation), append_bytes);
      call.SetOutput(output, present);
      core::runtime::RecordStorage(call, {.append_copied_bytes = append_bytes});
      return present;
    }
  }
  Tensor& present = call.AllocateOutput(output, rows.type, shape);
  auto* dst = static_cast<uint8_t*>(present.mutable_raw_data());
  for (int64_t b = 0; b < rows.batch; ++b)
    for (int64_t h = 0; h < rows.heads; ++h) {
      uint8_t* out = dst + static_cast<size_t>((b * rows.heads + h) * total) * row_bytes;
      if (past_len > 0 && row_bytes > 0) {
        const auto* src = static_cast<const uint8_t*>(past->strided_data()) +
                          static_cast<size_t>(past->BlockOffset(2, b * rows.heads + h)) * elem;
        std::memcpy(out, src, static_cast<size_t>(past_len) * row_bytes);
        out += static_cast<size_t>(past_len) * row_bytes;
      }
      copy_new_rows(b, h, out);
    }
  core::runtime::RecordStorage(
      call,
      {.allocations = 1,
       .allocated_bytes = present.nbytes(),
       .prefix_copied_bytes = static_cast<size_t>(rows.batch * rows.heads * past_len) * row_bytes,
       .append_copied_bytes = append_bytes});
  return present;
}

}  // namespace onnx_light::ops::math
