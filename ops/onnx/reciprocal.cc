// Reciprocal: y = 1 / x.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Reciprocal final : public core::runtime::KernelBase {
 public:
  explicit Reciprocal(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return decltype(x)(1) / x; });
  }
};

OL_KERNEL_FACTORY(Reciprocal)

}  // namespace onnx_light::ops
