// Erf: y = erf(x), the Gauss error function.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Erf final : public core::runtime::KernelBase {
 public:
  explicit Erf(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::erf(x); });
  }
};

OL_KERNEL_FACTORY(Erf)

}  // namespace onnx_light::ops
