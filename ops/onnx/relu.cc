// Relu: y = max(x, 0), for floats and signed integers (opset 14).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Relu final : public core::runtime::KernelBase {
 public:
  explicit Relu(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary<math::kFloatTypes | math::kSignedInts>(
        call, [](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); });
  }
};

OL_KERNEL_FACTORY(Relu)

}  // namespace onnx_light::ops
