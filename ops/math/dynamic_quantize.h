// Per-tensor UINT8 quantization with the range taken from the data, as ONNX's
// DynamicQuantizeLinear defines it (ops/onnx/dynamic_quantize_linear.cc), shared with the
// kernels that quantize their activations the same way.
#pragma once

#include <cstdint>

#include "ops/math/vexp.h"

namespace onnx_light::ops::math {

struct UInt8Quantization {
  float scale = 1.0f;
  uint8_t zero_point = 0;
};

// lo = min(0, min x), hi = max(0, max x) over the non-NaN elements; scale = (hi - lo) / 255,
// or 1 when hi == lo (all zeros: onnxruntime's value, which the ONNX reference's comment
// states; its code gives 1 / 255, and y and the zero point are 0 either way); zero point =
// round_half_even(clamp(-lo / scale, 0, 255)); FLOAT arithmetic throughout.
UInt8Quantization DynamicUInt8Range(const float* x, int64_t n, VecPath path = VecPath::kAuto);

// y = clamp(round_half_even(x / scale) + zero_point, 0, 255); NaN to the zero point.
// (`path` kPortable: the scalar loops, for the tests; the AVX-512 ones give the same bytes.)
void QuantizeUInt8(const float* x, int64_t n, UInt8Quantization q, uint8_t* y,
                   VecPath path = VecPath::kAuto);

}  // namespace onnx_light::ops::math
