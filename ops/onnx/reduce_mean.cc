// ReduceMean: see ops/math/reduce.h for axes (input or attribute), keepdims and
// noop_with_empty_axes.
#include "ops/kernel_factory.h"
#include "ops/math/reduce.h"

namespace onnx_light::ops {

class ReduceMean final : public core::runtime::KernelBase {
 public:
  explicit ReduceMean(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::ReduceCompute(call, attrs_, math::ReduceKind::kMean);
  }

 protected:
  void Configure(const NodeProto& node) override { attrs_ = math::ParseReduceAttrs(node); }

 private:
  math::ReduceAttrs attrs_;
};

OL_KERNEL_FACTORY(ReduceMean)

}  // namespace onnx_light::ops
