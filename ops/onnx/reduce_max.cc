// ReduceMax: see ops/math/reduce.h for axes (input or attribute), keepdims and
// noop_with_empty_axes.
#include "ops/kernel_factory.h"
#include "ops/math/reduce.h"

namespace onnx_light::ops {

class ReduceMax final : public core::runtime::KernelBase {
 public:
  explicit ReduceMax(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::ReduceCompute(call, attrs_, math::ReduceKind::kMax);
  }

 protected:
  void Configure(const NodeProto& node) override { attrs_ = math::ParseReduceAttrs(node); }

 private:
  math::ReduceAttrs attrs_;
};

OL_KERNEL_FACTORY(ReduceMax)

}  // namespace onnx_light::ops
