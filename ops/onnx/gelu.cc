// Gelu (opset 20): approximate="none": y = x/2 * (1 + erf(x / sqrt 2));
// approximate="tanh": y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
#include <cmath>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Gelu final : public core::runtime::KernelBase {
 public:
  explicit Gelu(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    if (tanh_) {
      math::Unary(call, [](auto x) {
        using T = decltype(x);
        const T k = T(0.79788456080286535587989211986876);  // sqrt(2 / pi)
        return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
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
      core::Throw(core::ErrorCode::kInvalidModel, core::runtime::NodeLabel(node) +
                                                      ": approximate must be 'none' or 'tanh', got '" +
                                                      approximate + "'");
    tanh_ = approximate == "tanh";
  }

 private:
  bool tanh_ = false;
};

OL_KERNEL_FACTORY(Gelu)

}  // namespace onnx_light::ops
