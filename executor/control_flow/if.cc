// If: runs then_branch or else_branch (compiled once each) and moves the branch's outputs to
// the node's outputs without copying payloads.
#include "executor/attributes.h"
#include "executor/control_flow/subgraph.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops {

using namespace core::runtime;

class IfKernel final : public KernelBase {
 public:
  IfKernel(const NodeProto& node, RuntimeContext& context)
      : then_(node, "then_branch", context), else_(node, "else_branch", context) {
    for (const Subgraph* branch : {&then_, &else_})
      OL_CHECK(branch->output_count() == static_cast<size_t>(node.output_size()),
               core::ErrorCode::kInvalidModel,
               NodeLabel(node) + ": a branch has " + std::to_string(branch->output_count()) +
                   " outputs, the node has " + std::to_string(node.output_size()));
    set_node(node);
  }

  void Compute(KernelCall& call) const override {
    const Subgraph& branch = ScalarBool(call, call.input(0), "cond") ? then_ : else_;
    RunFrame frame(branch.plan());
    std::vector<RuntimeValue> inputs, outputs;
    branch.Run(call, frame, inputs, outputs);
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (outputs[o].is_tensor())
        call.SetOutput(o, std::move(outputs[o]).TakeTensor());
      else
        call.SetOutputValue(o, std::move(outputs[o]));
    }
  }

 private:
  Subgraph then_;
  Subgraph else_;
};

std::unique_ptr<KernelBase> MakeIfKernel(const NodeProto& node, RuntimeContext& context,
                                         const KernelInfo&) {
  return std::make_unique<IfKernel>(node, context);
}

}  // namespace onnx_light::ops
