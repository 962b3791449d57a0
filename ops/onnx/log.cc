// Log: y = ln(x) (NaN below 0, -inf at 0).
#include <cmath>

#include "ops/kernel_factory.h"
#include "ops/math/unary.h"

namespace onnx_light::ops {

class Log final : public core::runtime::KernelBase {
 public:
  explicit Log(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::Unary(call, [](auto x) { return std::log(x); });
  }
};

OL_KERNEL_FACTORY(Log)

}  // namespace onnx_light::ops
