// Softplus: y = ln(e^x + 1), evaluated as max(x, 0) + log1p(e^-|x|) so that it does not
// overflow for large x. FLOAT (and the 16-bit types, through float) take e^-|x| from the
// vectorised exp of ops/math/vexp.h a block at a time; log1p stays scalar.
#include <algorithm>
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

class Softplus final : public core::runtime::KernelBase {
 public:
  explicit Softplus(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::UnaryFloatArray(
        call,
        [](const float* x, float* y, int64_t n) {
          constexpr int64_t kBlock = 256;
          float e[kBlock];
          for (int64_t i = 0; i < n; i += kBlock) {
            const int64_t m = std::min(kBlock, n - i);
            for (int64_t j = 0; j < m; ++j) e[j] = -std::abs(x[i + j]);
            math::VecExp(e, e, m);
            // x[i + j] is read before y[i + j] is written: y may be x.
            for (int64_t j = 0; j < m; ++j)
              y[i + j] = (x[i + j] > 0.0f ? x[i + j] : 0.0f) + std::log1p(e[j]);
          }
        },
        [](double x) { return (x > 0 ? x : 0.0) + std::log1p(std::exp(-std::abs(x))); });
  }
};

OL_KERNEL_FACTORY(Softplus)

}  // namespace onnx_light::ops
