// The parallel executor: a plan compiled into a tbb::flow::graph of continue_nodes (one per
// plan node), built once and reused for every run. One instance runs one frame at a time;
// sessions keep a pool of instances for concurrent runs. Construct and Run inside the
// session's tbb::task_arena (a flow graph attaches to the arena current at construction).
#pragma once

#include <tbb/flow_graph.h>

#include <atomic>
#include <exception>
#include <memory>
#include <vector>

#include "executor/graph_plan.h"

namespace onnx_light::core::runtime {

class FlowGraphExecutor {
 public:
  explicit FlowGraphExecutor(const GraphPlan& plan);
  FlowGraphExecutor(const FlowGraphExecutor&) = delete;
  FlowGraphExecutor& operator=(const FlowGraphExecutor&) = delete;

  // Runs every node on `frame`; the first failing node's error is rethrown after the rest
  // of the graph is cancelled (nodes already running finish).
  void Run(RunFrame& frame, RuntimeContext& context, const RunOptions& options);
  const GraphPlan& plan() const { return plan_; }

 private:
  using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
  void Body(size_t index);

  const GraphPlan& plan_;
  tbb::task_group_context group_;
  tbb::flow::graph graph_;
  tbb::flow::broadcast_node<tbb::flow::continue_msg> start_;
  std::vector<std::unique_ptr<Node>> nodes_;

  // The current run (one at a time per instance).
  RunFrame* frame_ = nullptr;
  RuntimeContext* context_ = nullptr;
  const RunOptions* options_ = nullptr;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

}  // namespace onnx_light::core::runtime
