// Helpers shared by the control-flow kernels: a body graph compiled once per node, and the
// slicing/stacking of per-iteration tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executor/graph_plan.h"

namespace onnx_light::core::runtime {

// A node's graph attribute compiled into a sub-plan. Values the body reads from enclosing
// scopes arrive as the node's implicit inputs (after its own inputs, see ImplicitInputs).
class Subgraph {
 public:
  // Call from a kernel factory (needs the current PlanBuildScope).
  Subgraph(const NodeProto& node, const std::string& attribute, RuntimeContext& context);
  const GraphPlan& plan() const { return *plan_; }
  const GraphProto& body() const { return plan_->graph(); }
  size_t input_count() const { return plan_->inputs().size(); }
  size_t output_count() const { return plan_->outputs().size(); }

  // Runs the body on `frame` (a RunFrame of plan(), reset here) with `inputs` moved into the
  // body's inputs and the captures taken from `call`; the body outputs are moved to
  // `outputs`.
  void Run(KernelCall& call, RunFrame& frame, std::vector<RuntimeValue>& inputs,
           std::vector<RuntimeValue>& outputs) const;

 private:
  std::string attribute_;
  std::unique_ptr<GraphPlan> plan_;
  std::vector<size_t> capture_inputs_;  // per capture slot: index of the call's input
};

// Scalar readers for condition and trip-count inputs (name the node on failure).
bool ScalarBool(const KernelCall& call, const Tensor& t, const std::string& what);
int64_t ScalarInt64(const KernelCall& call, const Tensor& t, const std::string& what);

// Slice `index` of `t` along `axis` (zero copy when axis is 0, else a gathered copy).
Tensor SliceAlongAxis(const Tensor& t, int64_t axis, int64_t index, Allocator& allocator);
// Stacks equally shaped tensors along a new axis `axis` (0..rank) into one tensor.
Tensor StackAlongAxis(const std::vector<Tensor>& parts, int64_t axis, Allocator& allocator,
                      const std::string& name);

// The result of stacking zero iterations: dtype and per-iteration dims from the body's
// declared output `output_index` (unknown dims become 0), with 0 along `axis`.
Tensor EmptyStack(const KernelCall& call, const GraphProto& body, size_t output_index, int64_t axis,
                  Allocator& allocator);

}  // namespace onnx_light::core::runtime
