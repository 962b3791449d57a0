// Exp: y = e^x.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Exp final : public core::runtime::KernelBase {
 public:
  explicit Exp(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::exp(x); });
  }
};

OL_KERNEL_FACTORY(Exp)

}  // namespace onnx_light::ops
