// Sigmoid: y = 1 / (1 + e^-x), evaluated without overflow for large |x|.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Sigmoid final : public core::runtime::KernelBase {
 public:
  explicit Sigmoid(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) {
      using T = decltype(x);
      if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
      const T e = std::exp(x);
      return e / (T(1) + e);
    });
  }
};

OL_KERNEL_FACTORY(Sigmoid)

}  // namespace onnx_light::ops
