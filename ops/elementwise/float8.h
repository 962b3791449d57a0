// The four float8 formats of ONNX (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ): exact decoding and
// round-to-nearest-even encoding with the Cast `saturate` rules of the ONNX spec.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace onnx_light::ops::elementwise {

bool IsFloat8(core::DataType type);
// `type` must satisfy IsFloat8.
float Float8ToFloat(core::DataType type, uint8_t code);
// saturate: out-of-range values and infinities clamp to the largest finite value (as the
// ONNX reference's saturate_cast); otherwise they become Inf (E5M2) or NaN.
uint8_t FloatToFloat8(core::DataType type, float value, bool saturate);

}  // namespace onnx_light::ops::elementwise
