// The shapes of numpy's matmul, shared by MatMul and MatMulInteger: rank-1 operands promoted
// (A to [1, K], B to [K, 1]) and the added dimension removed from the result, the batch
// dimensions (all but the last two) broadcast.
#pragma once

#include <cstdint>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

struct MatMulShape {
  int64_t m = 0, k = 0, n = 0;
  Shape a_batch, b_batch;  // each operand's batch dimensions
  Shape batch;             // the broadcast batch
  Shape out;               // the result's shape
};

// Fails the call (naming both shapes) for a scalar operand, inner dimensions that differ or
// batch dimensions that do not broadcast.
MatMulShape MatMulShapes(core::runtime::KernelCall& call, const Shape& a, const Shape& b);

}  // namespace onnx_light::ops::math
