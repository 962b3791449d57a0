// Neg: y = -x, for floats and signed integers (integers wrap).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Neg final : public core::runtime::KernelBase {
 public:
  explicit Neg(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary<math::kFloatTypes | math::kSignedInts>(
        call, [](auto x) { return static_cast<decltype(x)>(-x); });
  }
};

OL_KERNEL_FACTORY(Neg)

}  // namespace onnx_light::ops
