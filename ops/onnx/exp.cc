// Exp: y = e^x. FLOAT (and the 16-bit types, through float) use the vectorised kernel of
// ops/math/vexp.h; DOUBLE uses std::exp.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

class Exp final : public core::runtime::KernelBase {
 public:
  explicit Exp(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::UnaryFloatArray(
        call, [](const float* x, float* y, int64_t n) { math::VecExp(x, y, n); },
        [](double x) { return std::exp(x); });
  }
};

OL_KERNEL_FACTORY(Exp)

}  // namespace onnx_light::ops
