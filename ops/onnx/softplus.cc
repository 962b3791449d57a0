// Softplus: y = ln(e^x + 1), evaluated as max(x, 0) + log1p(e^-|x|) so that it does not
// overflow for large x.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Softplus final : public core::runtime::KernelBase {
 public:
  explicit Softplus(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) {
      using T = decltype(x);
      return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::abs(x)));
    });
  }
};

OL_KERNEL_FACTORY(Softplus)

}  // namespace onnx_light::ops
