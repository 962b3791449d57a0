// Gelu (opset 20): approximate="none": y = x/2 * (1 + erf(x / sqrt 2));
// approximate="tanh": y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
// FLOAT "tanh" uses the identity (1 + tanh(u)) / 2 = sigmoid(2u) with the vectorised
// sigmoid of ops/math/vexp.h (which also avoids 1 + tanh's cancellation for negative x).
// "none" stays scalar std::erf (no vector erf yet).
#include <algorithm>
#include <cmath>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/unary.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

class Gelu final : public core::runtime::KernelBase {
 public:
  explicit Gelu(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
    if (tanh_) {
      math::UnaryFloatArray(
          call,
          [](const float* x, float* y, int64_t n) {
            constexpr int64_t kBlock = 256;
            constexpr float k2 = static_cast<float>(2 * kSqrt2OverPi);
            float s[kBlock];
            for (int64_t i = 0; i < n; i += kBlock) {
              const int64_t m = std::min(kBlock, n - i);
              for (int64_t j = 0; j < m; ++j) {
                const float v = x[i + j];
                s[j] = k2 * (v + 0.044715f * v * v * v);
              }
              math::VecSigmoid(s, s, m);
              for (int64_t j = 0; j < m; ++j) y[i + j] = x[i + j] * s[j];
            }
          },
          [](double x) {
            return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
          });
    } else {
      math::Unary(call, [](auto x) {
        using T = decltype(x);
        return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440084436210485)));
      });
    }
  }

 protected:
  void Configure(const NodeProto& node) override {
    const std::string approximate = core::runtime::AttrString(node, "approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      core::Throw(core::ErrorCode::kInvalidModel,
                  core::runtime::NodeLabel(node) + ": approximate must be 'none' or 'tanh', got '" +
                      approximate + "'");
    tanh_ = approximate == "tanh";
  }

 private:
  bool tanh_ = false;
};

OL_KERNEL_FACTORY(Gelu)

}  // namespace onnx_light::ops
