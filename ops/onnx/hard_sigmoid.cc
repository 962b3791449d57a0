// HardSigmoid: y = max(0, min(1, alpha * x + beta)); alpha = 0.2, beta = 0.5 by default.
#include <algorithm>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class HardSigmoid final : public core::runtime::KernelBase {
 public:
  explicit HardSigmoid(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const float alpha = alpha_, beta = beta_;
    math::Unary(call, [alpha, beta](auto x) {
      using T = decltype(x);
      return std::clamp(T(alpha) * x + T(beta), T(0), T(1));
    });
  }

 protected:
  void Configure(const NodeProto& node) override {
    alpha_ = core::runtime::AttrFloat(node, "alpha", 0.2f);
    beta_ = core::runtime::AttrFloat(node, "beta", 0.5f);
  }

 private:
  float alpha_ = 0.2f;
  float beta_ = 0.5f;
};

OL_KERNEL_FACTORY(HardSigmoid)

}  // namespace onnx_light::ops
