#include "ops/elementwise/view.h"

namespace onnx_light::ops::elementwise {

bool CanViewRange(const Tensor& t) {
  return t.has_owner() && (t.dtype() == DataType::kString || core::ElementBits(t.dtype()) >= 8);
}

Tensor ViewRange(const Tensor& t, int64_t offset, Shape shape) {
  const size_t width = t.dtype() == DataType::kString
                           ? sizeof(std::string)
                           : static_cast<size_t>(core::ElementBits(t.dtype()) / 8);
  const auto* base = static_cast<const uint8_t*>(t.raw_data());
  return Tensor::Borrow(t.name(), t.dtype(), std::move(shape),
                        base + static_cast<size_t>(offset) * width, t.owner());
}

}  // namespace onnx_light::ops::elementwise
