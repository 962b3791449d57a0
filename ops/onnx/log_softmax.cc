// LogSoftmax: opset 13 normalises along one axis (default -1); opsets 1-12 coerce the input to 2D
// at `axis` (default 1) and normalise over everything from it on.
#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/softmax.h"

namespace onnx_light::ops {

class LogSoftmax final : public core::runtime::KernelBase {
 public:
  explicit LogSoftmax(const core::runtime::KernelInfo& info) : legacy_(info.node_opset() < 13) {}
  void Compute(core::runtime::KernelCall& call) const override {
    math::SoftmaxCompute(call, axis_, legacy_, /*log_softmax=*/true);
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", legacy_ ? 1 : -1);
  }

 private:
  bool legacy_;
  int64_t axis_ = -1;
};

OL_KERNEL_FACTORY(LogSoftmax)

}  // namespace onnx_light::ops
