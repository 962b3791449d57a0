#include "ops/math/quantize.h"

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops::math {

using core::runtime::ShapeToString;

AffineLayout::AffineLayout(const NodeProto& node, const Shape& x_shape, const Tensor& scale,
                           int64_t axis, int64_t block_size) {
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  if (block_size < 0) ThrowBadInput(node, "block_size must be >= 0");
  if (scale.numel() == 1 && block_size == 0 && scale.rank() <= 1) {  // per tensor
    inner_ = core::runtime::ShapeNumel(x_shape);
    return;
  }
  if (rank == 0)
    ThrowBadInput(node,
                  "a scalar input takes a scalar scale, got shape " + ShapeToString(scale.shape()));
  const int64_t a = NormalizeAxis(node, axis, rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (d < a) outer_ *= x_shape[d];
    if (d > a) inner_ *= x_shape[d];
  }
  n_ = x_shape[a];
  if (block_size == 0) {
    if (scale.rank() != 1 || scale.shape()[0] != n_)
      ThrowBadInput(node, "per-axis scale must have shape [" + std::to_string(n_) + "] (axis " +
                              std::to_string(a) + " of input shape " + ShapeToString(x_shape) +
                              "), got " + ShapeToString(scale.shape()));
    mode_ = Mode::kAxis;
    return;
  }
  mode_ = Mode::kBlocked;
  block_ = block_size;
  blocks_ = (n_ + block_size - 1) / block_size;
  Shape want = x_shape;
  want[a] = blocks_;
  if (scale.shape() != want)
    ThrowBadInput(node, "blocked scale must have shape " + ShapeToString(want) + " for input " +
                            ShapeToString(x_shape) + " and block_size " +
                            std::to_string(block_size) + ", got " + ShapeToString(scale.shape()));
}

void AffineLayout::CheckZeroPoint(const NodeProto& node, const Tensor& scale,
                                  const Tensor& zero_point) const {
  if (zero_point.shape() != scale.shape() && !(zero_point.numel() == 1 && scale.numel() == 1))
    ThrowBadInput(node, "zero point of shape " + ShapeToString(zero_point.shape()) +
                            " does not match the scale's shape " + ShapeToString(scale.shape()));
}

bool IsQuantizedIntType(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kInt4:
    case DataType::kUint4:
    case DataType::kInt2:
    case DataType::kUint2:
      return true;
    default:
      return false;
  }
}

void QuantRange(DataType t, int32_t* lo, int32_t* hi) {
  switch (t) {
    case DataType::kInt8:
      *lo = -128;
      *hi = 127;
      return;
    case DataType::kUint8:
      *lo = 0;
      *hi = 255;
      return;
    case DataType::kInt16:
      *lo = -32768;
      *hi = 32767;
      return;
    case DataType::kUint16:
      *lo = 0;
      *hi = 65535;
      return;
    case DataType::kInt4:
      *lo = -8;
      *hi = 7;
      return;
    case DataType::kUint4:
      *lo = 0;
      *hi = 15;
      return;
    case DataType::kInt2:
      *lo = -2;
      *hi = 1;
      return;
    case DataType::kUint2:
      *lo = 0;
      *hi = 3;
      return;
    default:
      *lo = 0;
      *hi = 0;
      return;
  }
}

int32_t QuantGet(DataType t, const void* data, int64_t i) {
  switch (t) {
    case DataType::kInt8:
      return static_cast<const int8_t*>(data)[i];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(data)[i];
    case DataType::kUint16:
      return static_cast<const uint16_t*>(data)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    default:
      return core::PackedGet(t, data, i);
  }
}

}  // namespace onnx_light::ops::math
