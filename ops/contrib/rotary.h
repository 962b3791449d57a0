// Rotation of one head row by a cos/sin cache row, shared by com.microsoft RotaryEmbedding
// and GroupQueryAttention (do_rotary). Semantics: onnxruntime's contrib_ops/cpu/bert/
// rotary_embedding.cc: the first `rotary_dim` elements are rotated in pairs (x[i],
// x[i + rotary_dim/2]) or, interleaved, (x[2i], x[2i+1]), by angle i of the cache row:
//   out_a = a * cos - b * sin,  out_b = b * cos + a * sin;
// the elements past rotary_dim are copied.
#pragma once

#include <cstdint>

namespace onnx_light::ops::contrib {

// `out` may equal `in`.
inline void RotateRow(const float* in, float* out, int64_t head_size, int64_t rotary_dim,
                      const float* cos, const float* sin, bool interleaved) {
  const int64_t half = rotary_dim / 2;
  if (interleaved) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = in[2 * i], b = in[2 * i + 1];
      out[2 * i] = a * cos[i] - b * sin[i];
      out[2 * i + 1] = b * cos[i] + a * sin[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = in[i], b = in[i + half];
      out[i] = a * cos[i] - b * sin[i];
      out[i + half] = b * cos[i] + a * sin[i];
    }
  }
  if (out != in)
    for (int64_t i = rotary_dim; i < head_size; ++i) out[i] = in[i];
}

}  // namespace onnx_light::ops::contrib
