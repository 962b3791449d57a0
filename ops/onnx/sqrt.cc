// Sqrt: y = sqrt(x) (NaN below 0).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Sqrt final : public core::runtime::KernelBase {
 public:
  explicit Sqrt(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::sqrt(x); });
  }
};

OL_KERNEL_FACTORY(Sqrt)

}  // namespace onnx_light::ops
