#include "executor/runtime_session.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include <tbb/task_arena.h>

#include "executor/flow_executor.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

// One compiled plan per kernel configuration (context family), with its flow-graph pool.
struct RuntimeSession::CachedPlan {
  const void* config_id = nullptr;
  std::shared_ptr<const void> keepalive;  // the context configuration the kernels came from
  std::unique_ptr<GraphPlan> plan;
  std::mutex pool_mu;
  std::vector<std::unique_ptr<FlowGraphExecutor>> idle;  // built once, reused by later runs
};

struct RuntimeSession::Impl {
  explicit Impl(int threads)
      : arena(threads > 0 ? threads : static_cast<int>(tbb::task_arena::automatic)) {}
  tbb::task_arena arena;  // declared first: destroyed after every flow graph
  std::mutex mu;
  std::vector<std::unique_ptr<CachedPlan>> plans;
};

namespace {
// The caller keeps a model passed by reference alive; views then borrow without owning.
std::shared_ptr<const ModelProto> Unowned(const ModelProto& model) {
  return std::shared_ptr<const ModelProto>(&model, [](const ModelProto*) {});
}
}  // namespace

RuntimeSession::RuntimeSession(const ModelProto& model, RuntimeSessionOptions options)
    : RuntimeSession(Unowned(model), options) {}

RuntimeSession::RuntimeSession(std::shared_ptr<const ModelProto> model,
                               RuntimeSessionOptions options)
    : model_(std::move(model)), options_(options) {
  OL_CHECK(model_ != nullptr, ErrorCode::kInvalidArgument, "RuntimeSession: null model");
  OL_CHECK(options_.intra_op_threads >= 0, ErrorCode::kInvalidArgument,
           "RuntimeSessionOptions.intra_op_threads must be >= 0, got " +
               std::to_string(options_.intra_op_threads));
  impl_ = std::make_unique<Impl>(options_.intra_op_threads);
}

RuntimeSession::RuntimeSession(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                               RuntimeSessionOptions options)
    : RuntimeSession(std::move(model), options) {
  Cached(context);
}

RuntimeSession::~RuntimeSession() = default;

RuntimeSession::CachedPlan& RuntimeSession::Cached(RuntimeContext& context) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->plans)
    if (c->config_id == context.config_id()) return *c;
  auto cached = std::make_unique<CachedPlan>();
  cached->config_id = context.config_id();
  cached->keepalive = context.config_keepalive();
  cached->plan = GraphPlan::BuildModel(model_, context, options_.fold_constants,
                                      options_.fuse_subgraphs);
  impl_->plans.push_back(std::move(cached));
  return *impl_->plans.back();
}

RuntimeSession::CachedPlan& RuntimeSession::CachedFor(const GraphPlan& plan) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->plans)
    if (c->plan.get() == &plan) return *c;
  Throw(ErrorCode::kInvalidArgument, "RuntimeSession::Execute: the frame's plan is not a plan "
                                     "of this session");
}

const GraphPlan& RuntimeSession::plan(RuntimeContext& context) { return *Cached(context).plan; }

RuntimeSessionOptions::ExecutorMode RuntimeSession::executor_for(const GraphPlan& plan) const {
  using Mode = RuntimeSessionOptions::ExecutorMode;
  if (options_.executor != Mode::kAuto) return options_.executor;
  // Task overhead (~µs per node) only pays off with real parallel width and enough nodes.
  constexpr size_t kMinFlowNodes = 8;
  if (impl_->arena.max_concurrency() < 2 || plan.width() < 2 ||
      plan.nodes().size() < kMinFlowNodes)
    return Mode::kInline;
  return Mode::kFlowGraph;
}

void RuntimeSession::CheckFeed(const GraphPlan& plan, size_t index, const RuntimeValue& value) {
  const auto& in = plan.inputs()[index];
  if (value.empty())
    Throw(ErrorCode::kInvalidArgument, "input '" + in.name + "': the feed is empty");
  CheckValueType(value, in.type, "input '" + in.name + "'");
}

void RuntimeSession::Execute(RuntimeContext& context, RunFrame& frame,
                             const RunOptions& options) {
  CachedPlan& cached = CachedFor(frame.plan());
  const GraphPlan& plan = *cached.plan;
  frame.FillDefaults();
  // The spec's fresh child context: shares configuration, allocator and events, and sees
  // only this run's frame.
  RuntimeContext child = context.MakeChild(&frame, options.cancel_requested);
  child.set_persistent_append_hook(options.append_hook);
  const RunOptions run_options{child.cancel_requested()};
  if (executor_for(plan) == RuntimeSessionOptions::ExecutorMode::kInline) {
    impl_->arena.execute([&] { ExecuteInline(plan, frame, child, run_options); });
    return;
  }
  impl_->arena.execute([&] {
    std::unique_ptr<FlowGraphExecutor> executor;
    {
      std::lock_guard<std::mutex> lock(cached.pool_mu);
      if (!cached.idle.empty()) {
        executor = std::move(cached.idle.back());
        cached.idle.pop_back();
      }
    }
    if (!executor) executor = std::make_unique<FlowGraphExecutor>(plan);
    struct Return {
      CachedPlan& cached;
      std::unique_ptr<FlowGraphExecutor>& executor;
      ~Return() {
        std::lock_guard<std::mutex> lock(cached.pool_mu);
        cached.idle.push_back(std::move(executor));
      }
    } give_back{cached, executor};
    executor->Run(frame, child, run_options);
  });
}

RuntimeValueMap RuntimeSession::Run(RuntimeContext& context, RuntimeValueMap feeds,
                                    const RunOptions& options) {
  const GraphPlan& plan = this->plan(context);
  RunFrame frame(plan);
  std::vector<std::string> unknown;
  for (auto& [name, value] : feeds) {
    // Graph inputs hold the first slots, in declaration order.
    const int slot = plan.FindSlot(name);
    if (slot < 0 || static_cast<size_t>(slot) >= plan.inputs().size()) {
      unknown.push_back(name);
      continue;
    }
    CheckFeed(plan, static_cast<size_t>(slot), value);
    frame.Set(slot, std::move(value));
  }
  if (!unknown.empty()) {
    std::sort(unknown.begin(), unknown.end());
    std::string names;
    for (const auto& n : unknown) names += (names.empty() ? "'" : ", '") + n + "'";
    std::string declared;
    for (const auto& in : plan.inputs())
      declared += (declared.empty() ? "'" : ", '") + in.name + "'";
    Throw(ErrorCode::kInvalidArgument, "unknown feed name(s) " + names +
                                           "; the graph inputs are " +
                                           (declared.empty() ? std::string("none") : declared));
  }
  Execute(context, frame, options);
  RuntimeValueMap outputs;
  outputs.reserve(plan.outputs().size());
  for (size_t i = 0; i < plan.outputs().size(); ++i)
    outputs[plan.outputs()[i].name] = frame.TakeOutput(i);
  return outputs;
}

}  // namespace onnx_light::core::runtime
