// Loop: runs the body (compiled once) while i < M and cond; loop-carried values move from
// one iteration to the next; per-iteration scan outputs are stacked along a new axis 0.
#include <limits>

#include "core/checked_math.h"
#include "executor/attributes.h"
#include "executor/control_flow/subgraph.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops {

using namespace core::runtime;

class LoopKernel final : public KernelBase {
 public:
  LoopKernel(const NodeProto& node, RuntimeContext& context) : body_(node, "body", context) {
    OL_CHECK(node.input_size() >= 2, core::ErrorCode::kInvalidModel,
             NodeLabel(node) + ": Loop needs the inputs M and cond (either may be empty)");
    carried_ = static_cast<size_t>(node.input_size()) - 2;
    OL_CHECK(body_.input_count() == carried_ + 2, core::ErrorCode::kInvalidModel,
             NodeLabel(node) + ": the body must take " + std::to_string(carried_ + 2) +
                 " inputs (iteration, cond, loop-carried values), it declares " +
                 std::to_string(body_.input_count()));
    OL_CHECK(body_.output_count() >= carried_ + 1, core::ErrorCode::kInvalidModel,
             NodeLabel(node) + ": the body must return cond and " + std::to_string(carried_) +
                 " loop-carried values");
    scans_ = body_.output_count() - 1 - carried_;
    OL_CHECK(static_cast<size_t>(node.output_size()) <= carried_ + scans_,
             core::ErrorCode::kInvalidModel,
             NodeLabel(node) + ": the node has more outputs than the body produces");
    set_node(node);
  }

  void Compute(KernelCall& call) const override {
    const int64_t trip_count = call.has_input(0) ? ScalarInt64(call, call.input(0), "M")
                                                 : std::numeric_limits<int64_t>::max();
    bool cond = call.has_input(1) ? ScalarBool(call, call.input(1), "cond") : true;
    std::vector<RuntimeValue> carried(carried_);
    for (size_t j = 0; j < carried_; ++j)
      if (call.has_input(2 + j)) carried[j] = call.input_value(2 + j);
    std::vector<std::vector<Tensor>> scans(scans_);
    // The scan outputs grow by one slice per iteration and M comes from the model or a feed:
    // their bytes (plus each slice's bookkeeping) are held to max_tensor_bytes, which their
    // concatenation would need anyway, so a huge M fails instead of exhausting memory.
    size_t scan_bytes = 0;
    RunFrame frame(body_.plan());
    std::vector<RuntimeValue> inputs, outputs;
    for (int64_t i = 0; i < trip_count && cond; ++i) {
      inputs.clear();
      inputs.emplace_back(Tensor::FromInt64("iteration_num", {}, {i}));
      inputs.emplace_back(Tensor::FromBool("cond", {}, {cond}));
      for (auto& v : carried) inputs.push_back(std::move(v));
      body_.Run(call, frame, inputs, outputs);
      cond = ScalarBool(call, outputs[0].tensor(), "the body's cond output");
      for (size_t j = 0; j < carried_; ++j) carried[j] = std::move(outputs[1 + j]);
      for (size_t k = 0; k < scans_; ++k) {
        RuntimeValue& v = outputs[1 + carried_ + k];
        if (!v.is_tensor()) call.Fail("scan output " + std::to_string(k) + " must be a tensor");
        scans[k].push_back(std::move(v).TakeTensor());
        scan_bytes += scans[k].back().nbytes() + sizeof(Tensor);
        if (scan_bytes > core::MaxTensorBytes())
          core::CheckTensorBytes(scan_bytes, NodeLabel(call.node()) + ": the scan outputs of " +
                                                 std::to_string(i + 1) + " iterations");
      }
    }
    for (size_t j = 0; j < carried_; ++j) {
      if (carried[j].is_tensor())
        call.SetOutput(j, std::move(carried[j]).TakeTensor());
      else
        call.SetOutputValue(j, std::move(carried[j]));
    }
    for (size_t k = 0; k < scans_; ++k) {
      if (!call.output_wanted(carried_ + k)) continue;
      call.SetOutput(carried_ + k,
                     scans[k].empty()
                         ? EmptyStack(call, body_.body(), 1 + carried_ + k, 0, call.allocator())
                         : StackAlongAxis(scans[k], 0, call.allocator(),
                                          call.node().output(static_cast<int>(carried_ + k))));
    }
  }

 private:
  Subgraph body_;
  size_t carried_ = 0;
  size_t scans_ = 0;
};

std::unique_ptr<KernelBase> MakeLoopKernel(const NodeProto& node, RuntimeContext& context,
                                           const KernelInfo&) {
  return std::make_unique<LoopKernel>(node, context);
}

}  // namespace onnx_light::ops
