// Scan (opset 9+): iterates the body over slices of the scan inputs along their scan axes
// (forward or reverse), carrying state, and stacks the per-iteration scan outputs.
// Axis-0 input slices are zero-copy views; other axes gather a copy.
#include "executor/attributes.h"
#include "executor/control_flow/subgraph.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops {

using namespace core::runtime;

class ScanKernel final : public KernelBase {
 public:
  ScanKernel(const NodeProto& node, RuntimeContext& context) : body_(node, "body", context) {
    const std::string label = NodeLabel(node);
    const int64_t m = RequiredAttrInt(node, "num_scan_inputs");
    OL_CHECK(m >= 1 && m <= node.input_size(), core::ErrorCode::kInvalidModel,
             label + ": num_scan_inputs must be in [1, " + std::to_string(node.input_size()) +
                 "], got " + std::to_string(m));
    scan_inputs_ = static_cast<size_t>(m);
    state_ = static_cast<size_t>(node.input_size()) - scan_inputs_;
    OL_CHECK(body_.input_count() == state_ + scan_inputs_, core::ErrorCode::kInvalidModel,
             label + ": the body must take " + std::to_string(state_ + scan_inputs_) + " inputs");
    OL_CHECK(body_.output_count() >= state_, core::ErrorCode::kInvalidModel,
             label + ": the body must return the " + std::to_string(state_) + " state values");
    scan_outputs_ = body_.output_count() - state_;
    input_axes_ = AttrInts(node, "scan_input_axes", std::vector<int64_t>(scan_inputs_, 0));
    input_dirs_ = AttrInts(node, "scan_input_directions", std::vector<int64_t>(scan_inputs_, 0));
    output_axes_ = AttrInts(node, "scan_output_axes", std::vector<int64_t>(scan_outputs_, 0));
    output_dirs_ = AttrInts(node, "scan_output_directions", std::vector<int64_t>(scan_outputs_, 0));
    OL_CHECK(input_axes_.size() == scan_inputs_ && input_dirs_.size() == scan_inputs_ &&
                 output_axes_.size() == scan_outputs_ && output_dirs_.size() == scan_outputs_,
             core::ErrorCode::kInvalidModel,
             label + ": scan axes/directions attributes must have one entry per scan value");
    set_node(node);
  }

  void Compute(KernelCall& call) const override {
    std::vector<RuntimeValue> state(state_);
    for (size_t j = 0; j < state_; ++j) state[j] = call.input_value(j);
    std::vector<const Tensor*> xs(scan_inputs_);
    std::vector<int64_t> axes(scan_inputs_);
    int64_t length = -1;
    for (size_t m = 0; m < scan_inputs_; ++m) {
      xs[m] = &call.input(state_ + m);
      const int64_t rank = xs[m]->rank();
      int64_t axis = input_axes_[m] < 0 ? input_axes_[m] + rank : input_axes_[m];
      if (axis < 0 || axis >= rank)
        call.Fail("scan_input_axes[" + std::to_string(m) + "] is out of range for shape " +
                  ShapeToString(xs[m]->shape()));
      axes[m] = axis;
      const int64_t n = xs[m]->dim(axis);
      if (length >= 0 && n != length)
        call.Fail("scan inputs disagree on the sequence length: " + std::to_string(length) +
                  " and " + std::to_string(n));
      length = n;
    }
    std::vector<std::vector<Tensor>> scans(scan_outputs_);
    RunFrame frame(body_.plan());
    std::vector<RuntimeValue> inputs, outputs;
    for (int64_t t = 0; t < length; ++t) {
      inputs.clear();
      for (auto& v : state) inputs.push_back(std::move(v));
      for (size_t m = 0; m < scan_inputs_; ++m) {
        const int64_t index = input_dirs_[m] ? length - 1 - t : t;
        inputs.emplace_back(SliceAlongAxis(*xs[m], axes[m], index, call.allocator()));
      }
      body_.Run(call, frame, inputs, outputs);
      for (size_t j = 0; j < state_; ++j) state[j] = std::move(outputs[j]);
      for (size_t k = 0; k < scan_outputs_; ++k) {
        RuntimeValue& v = outputs[state_ + k];
        if (!v.is_tensor()) call.Fail("scan output " + std::to_string(k) + " must be a tensor");
        scans[k].push_back(std::move(v).TakeTensor());
      }
    }
    for (size_t j = 0; j < state_; ++j) {
      if (state[j].is_tensor())
        call.SetOutput(j, std::move(state[j]).TakeTensor());
      else
        call.SetOutputValue(j, std::move(state[j]));
    }
    for (size_t k = 0; k < scan_outputs_; ++k) {
      if (!call.output_wanted(state_ + k)) continue;
      auto& parts = scans[k];
      if (output_dirs_[k]) std::reverse(parts.begin(), parts.end());
      int64_t axis = output_axes_[k];
      if (parts.empty()) {
        call.SetOutput(state_ + k, EmptyStack(call, body_.body(), state_ + k, axis < 0 ? 0 : axis,
                                              call.allocator()));
        continue;
      }
      const int64_t rank = parts.front().rank() + 1;
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank)
        call.Fail("scan_output_axes[" + std::to_string(k) + "] is out of range for rank " +
                  std::to_string(rank));
      call.SetOutput(state_ + k, StackAlongAxis(parts, axis, call.allocator(),
                                                call.node().output(static_cast<int>(state_ + k))));
    }
  }

 private:
  Subgraph body_;
  size_t scan_inputs_ = 0, state_ = 0, scan_outputs_ = 0;
  std::vector<int64_t> input_axes_, input_dirs_, output_axes_, output_dirs_;
};

std::unique_ptr<KernelBase> MakeScanKernel(const NodeProto& node, RuntimeContext& context,
                                           const KernelInfo&) {
  return std::make_unique<ScanKernel>(node, context);
}

}  // namespace onnx_light::ops
