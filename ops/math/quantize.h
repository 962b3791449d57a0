// Affine (de)quantization shared by QuantizeLinear and DequantizeLinear:
//   q = saturate(round_half_even(x / scale) + zero_point),  x = (q - zero_point) * scale
// with per-tensor (one scale), per-axis (a 1-D scale along `axis`) or blocked (scale of
// x's rank, x.shape[axis] split into blocks of `block_size`) parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

// x viewed as [outer, n, inner] around the quantization axis; the parameter of element
// (o, a, i) is at base(o, a) + stride * i.
class AffineLayout {
 public:
  AffineLayout(const onnx_light::NodeProto& node, const Shape& x_shape, const Tensor& scale,
               int64_t axis, int64_t block_size);
  int64_t outer() const { return outer_; }
  int64_t n() const { return n_; }
  int64_t inner() const { return inner_; }
  int64_t Base(int64_t o, int64_t a) const {
    if (mode_ == Mode::kTensor) return 0;
    if (mode_ == Mode::kAxis) return a;
    return (o * blocks_ + a / block_) * inner_;
  }
  int64_t stride() const { return mode_ == Mode::kBlocked ? 1 : 0; }
  // Checks that a zero point has the scale's shape.
  void CheckZeroPoint(const onnx_light::NodeProto& node, const Tensor& scale,
                      const Tensor& zero_point) const;

 private:
  enum class Mode { kTensor, kAxis, kBlocked };
  Mode mode_ = Mode::kTensor;
  int64_t outer_ = 1, n_ = 1, inner_ = 1, block_ = 1, blocks_ = 1;
};

// True for the integer types that can hold quantized values here (8/16-bit, 4-bit and
// 2-bit, signed and unsigned).
bool IsQuantizedIntType(DataType t);
// [min, max] of such a type.
void QuantRange(DataType t, int32_t* lo, int32_t* hi);
// Element i of an integer tensor of a quantized type (or INT32) as int32.
int32_t QuantGet(DataType t, const void* data, int64_t i);

}  // namespace onnx_light::ops::math
