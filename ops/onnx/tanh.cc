// Tanh: y = tanh(x).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Tanh final : public core::runtime::KernelBase {
 public:
  explicit Tanh(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::tanh(x); });
  }
};

OL_KERNEL_FACTORY(Tanh)

}  // namespace onnx_light::ops
