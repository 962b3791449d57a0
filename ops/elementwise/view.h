// Views on a contiguous range of another tensor's elements (Split and Slice outputs that are
// one contiguous block): same owner, no copy, never writable.
#pragma once

#include "ops/elementwise/types.h"

namespace onnx_light::ops::elementwise {

// True when `t` can be viewed by element offset: an owner keeps its bytes alive and the
// dtype has whole-byte elements (or is STRING).
bool CanViewRange(const Tensor& t);
// Elements [offset, offset + numel(shape)) of `t` viewed with `shape`.
Tensor ViewRange(const Tensor& t, int64_t offset, Shape shape);

}  // namespace onnx_light::ops::elementwise
