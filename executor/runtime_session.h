// RuntimeSession: runs a model's graph many times. The plan (executor/graph_plan.h) is built
// once per kernel configuration (the first Run with a context, or eagerly) and cached; runs
// only fill a frame of slots. Small or chain-shaped plans run inline on the calling thread,
// wider ones on a reusable tbb::flow::graph inside the session's tbb::task_arena.
//
// Threading: Run may be called concurrently (each run has its own frame and child context;
// flow graphs are pooled, one per concurrent run). Do not change the context's configuration
// during a call.
#pragma once

#include <cstddef>
#include <memory>

#include "core/runtime_value.h"
#include "executor/graph_plan.h"
#include "executor/runtime_context.h"

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core::runtime {

struct RuntimeSessionOptions {
  int intra_op_threads = 0;  // threads of the session's arena; 0 = all cores
  // Initial append capacity of persistent tensors (PersistentValueState only; 0 disables).
  size_t persistent_tensor_initial_capacity = 32;
  enum class ExecutorMode { kAuto, kInline, kFlowGraph };
  ExecutorMode executor = ExecutorMode::kAuto;
  // Evaluate subgraphs that depend only on constants once, when the plan is built
  // (GraphPlan::Build). Off: every node runs on every call (for comparisons).
  bool fold_constants = true;
  // Replace subgraphs exporters write (torch's decomposed attention) by fused kernels when
  // the plan is built (executor/fusion.h). Off: the graph's own nodes run.
  bool fuse_subgraphs = true;
};

class RuntimeSession {
 public:
  // The model must outlive the session and any returned initializer views.
  explicit RuntimeSession(const ModelProto& model, RuntimeSessionOptions options = {});
  // Keeps the model alive (also inside returned initializer views).
  explicit RuntimeSession(std::shared_ptr<const ModelProto> model,
                          RuntimeSessionOptions options = {});
  // Builds the plan for `context` now instead of on the first Run.
  RuntimeSession(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                 RuntimeSessionOptions options = {});
  ~RuntimeSession();
  RuntimeSession(const RuntimeSession&) = delete;
  RuntimeSession& operator=(const RuntimeSession&) = delete;

  // Validates the feeds (unknown names, missing required inputs, dtype/rank against the
  // declarations), runs the graph in a fresh child of `context` and returns the graph
  // outputs by name, moved out of the frame (no payload copies).
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      const RunOptions& options = {});

  // Slot-level API (no maps): get the plan for `context`, make a RunFrame(plan), Set its
  // input slots (plan.inputs()[i].slot), Execute, then TakeOutput(i) per plan.outputs().
  const GraphPlan& plan(RuntimeContext& context);
  // Runs `frame` (inputs set; defaults filled here) in a fresh child of `context`. The
  // frame's plan must come from plan(context) of this session.
  void Execute(RuntimeContext& context, RunFrame& frame, const RunOptions& options = {});
  // Checks input `index` of `plan` against its declaration (throws kInvalidArgument).
  static void CheckFeed(const GraphPlan& plan, size_t index, const RuntimeValue& value);

  // The executor Execute uses for `plan` (kAuto resolved).
  RuntimeSessionOptions::ExecutorMode executor_for(const GraphPlan& plan) const;
  const ModelProto& model() const { return *model_; }
  const std::shared_ptr<const ModelProto>& model_ptr() const { return model_; }
  const RuntimeSessionOptions& options() const { return options_; }
  RuntimeSessionOptions& mutable_options() { return options_; }

 private:
  struct Impl;
  struct CachedPlan;
  CachedPlan& Cached(RuntimeContext& context);
  CachedPlan& CachedFor(const GraphPlan& plan);

  std::shared_ptr<const ModelProto> model_;
  RuntimeSessionOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnx_light::core::runtime
