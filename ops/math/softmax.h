// Softmax and LogSoftmax over one axis (opset >= 13), or over all dimensions from `axis`
// on with the input coerced to 2D (opsets 1-12).
#pragma once

#include <cstdint>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

void SoftmaxCompute(KernelCall& call, int64_t axis, bool coerce_2d, bool log_softmax);

}  // namespace onnx_light::ops::math
