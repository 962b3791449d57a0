// CastLike: Cast to the dtype of the second input (whose values are not read).
#include "ops/elementwise/cast_util.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class CastLike final : public core::runtime::KernelBase {
 public:
  explicit CastLike(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    saturate_ = core::runtime::AttrInt(node, "saturate", 1) != 0;
  }

  void Compute(core::runtime::KernelCall& call) const override {
    elementwise::CastToOutput(call, call.input(0), call.input(1).dtype(), saturate_);
  }

 private:
  bool saturate_ = true;
};

OL_KERNEL_FACTORY(CastLike)

}  // namespace onnx_light::ops
