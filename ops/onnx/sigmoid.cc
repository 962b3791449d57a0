// Sigmoid: y = 1 / (1 + e^-x), evaluated without overflow for large |x|. FLOAT (and the
// 16-bit types, through float) use the vectorised kernel of ops/math/vexp.h: this is the
// gate of every SiLU in an LLM's MLP, where scalar std::exp dominated prompt time.
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

class Sigmoid final : public core::runtime::KernelBase {
 public:
  explicit Sigmoid(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::UnaryFloatArray(
        call, [](const float* x, float* y, int64_t n) { math::VecSigmoid(x, y, n); },
        [](double x) {
          if (x >= 0) return 1 / (1 + std::exp(-x));
          const double e = std::exp(x);
          return e / (1 + e);
        });
  }
};

OL_KERNEL_FACTORY(Sigmoid)

}  // namespace onnx_light::ops
