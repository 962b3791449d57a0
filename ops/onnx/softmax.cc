// Softmax: opset 13 normalises along one axis (default -1); opsets 1-12 coerce the input to 2D
// at `axis` (default 1) and normalise over everything from it on.
#include "ops/math/softmax.h"

#include "executor/attributes.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Softmax final : public core::runtime::KernelBase {
 public:
  explicit Softmax(const core::runtime::KernelInfo& info) : legacy_(info.node_opset() < 13) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::SoftmaxCompute(call, axis_, legacy_, /*log_softmax=*/false);
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", legacy_ ? 1 : -1);
  }

 private:
  bool legacy_;
  int64_t axis_ = -1;
};

OL_KERNEL_FACTORY(Softmax)

}  // namespace onnx_light::ops
