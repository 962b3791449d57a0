// Sin: y = sin(x).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Sin final : public core::runtime::KernelBase {
 public:
  explicit Sin(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::sin(x); });
  }
};

OL_KERNEL_FACTORY(Sin)

}  // namespace onnx_light::ops
