#include "executor/flow_executor.h"

#include "core/checked_math.h"

namespace onnx_light::core::runtime {

FlowGraphExecutor::FlowGraphExecutor(const GraphPlan& plan)
    : plan_(plan), graph_(group_), start_(graph_) {
  const auto& nodes = plan.nodes();
  nodes_.reserve(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k)
    nodes_.push_back(std::make_unique<Node>(graph_, [this, k](const tbb::flow::continue_msg&) {
      Body(k);
      return tbb::flow::continue_msg();
    }));
  for (int k : plan.sources()) tbb::flow::make_edge(start_, *nodes_[static_cast<size_t>(k)]);
  for (size_t k = 0; k < nodes.size(); ++k)
    for (int s : nodes[k].successors)
      tbb::flow::make_edge(*nodes_[k], *nodes_[static_cast<size_t>(s)]);
}

void FlowGraphExecutor::Body(size_t index) {
  if (failed_.load(std::memory_order_acquire)) return;
  try {
    // Kernels run on the arena's threads: the run's size and memory limits are set on each.
    ScopedMaxTensorBytes scope(options_->max_tensor_bytes);
    ScopedRunBudget run_budget(options_->run_budget);
    RunPlanNode(plan_, index, *frame_, *context_, *options_, /*concurrent=*/true);
  } catch (...) {
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      error_ = std::current_exception();
    // First error wins: nodes not yet started are skipped.
    group_.cancel_group_execution();
  }
}

void FlowGraphExecutor::Run(RunFrame& frame, RuntimeContext& context, const RunOptions& options) {
  frame_ = &frame;
  context_ = &context;
  options_ = &options;
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  frame.ResetReaderCounts();
  start_.try_put(tbb::flow::continue_msg());
  graph_.wait_for_all();
  // A cancelled graph keeps partial predecessor counts and a cancelled context: reset both
  // so the next run starts clean.
  if (failed_.load(std::memory_order_acquire) || graph_.is_cancelled()) graph_.reset();
  frame_ = nullptr;
  context_ = nullptr;
  options_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace onnx_light::core::runtime
