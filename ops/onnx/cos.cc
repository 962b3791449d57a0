// Cos: y = cos(x).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Cos final : public core::runtime::KernelBase {
 public:
  explicit Cos(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::cos(x); });
  }
};

OL_KERNEL_FACTORY(Cos)

}  // namespace onnx_light::ops
