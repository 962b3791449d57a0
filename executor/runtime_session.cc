#include "executor/runtime_session.h"

#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "core/onnx_arity.h"
#include "executor/flow_executor.h"
#include "executor/node_profile.h"
#include "executor/parallel.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

// One compiled plan per kernel configuration, with its flow-graph pool. `contexts` lists
// every configuration that uses the plan (the first built it); each entry keeps that
// configuration alive, so an id in the list always denotes the same live configuration.
struct RuntimeSession::CachedPlan {
  struct User {
    const void* config_id;
    std::shared_ptr<const void> keepalive;  // the registry and factories the kernels came from
  };
  std::vector<User> contexts;
  // What made the builder's kernels: equal in an equivalent configuration.
  OpsetMap opsets;
  const Allocator* allocator = nullptr;
  bool shareable = false;  // the builder had no custom kernels
  std::unique_ptr<GraphPlan> plan;
  std::atomic<int> running{0};  // Execute calls in progress
  std::mutex pool_mu;
  std::vector<std::unique_ptr<FlowGraphExecutor>> idle;  // built once, reused by later runs

  bool Serves(const void* id) const {
    for (const auto& u : contexts)
      if (u.config_id == id) return true;
    return false;
  }
  // Whether the kernels `context` would build are the ones this plan holds.
  bool EquivalentTo(const RuntimeContext& context) const {
    return shareable && context.custom_kernels().empty() && &context.allocator() == allocator &&
           context.kernel_ctx().opsets() == opsets;
  }
  // Drops the users whose configuration only this list keeps alive (their contexts are
  // gone). users[0] built the plan and stays with it: its registry made the kernels.
  void ForgetGoneUsers() {
    for (size_t u = contexts.size(); u-- > 1;)
      if (contexts[u].keepalive.use_count() == 1)
        contexts.erase(contexts.begin() + static_cast<long>(u));
  }
  // True when no context of this plan is alive (only the session holds their configuration)
  // and no run uses it: no one can reach the plan again.
  bool Unreachable() const {
    if (running.load(std::memory_order_acquire) != 0) return false;
    for (const auto& u : contexts)
      if (u.keepalive.use_count() > 1) return false;
    return true;
  }
};

struct RuntimeSession::Impl {
  explicit Impl(int threads)
      : arena(threads > 0 ? threads : static_cast<int>(tbb::task_arena::automatic)) {}
  tbb::task_arena arena;  // declared first: destroyed after every flow graph
  std::mutex mu;
  std::vector<std::unique_ptr<CachedPlan>> plans;
  std::mutex attachment_mu;
  std::vector<std::pair<const void*, std::shared_ptr<const void>>> attachments;
  std::unique_ptr<NodeProfile> profile;  // RuntimeSessionOptions::profile
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
  CheckNodeArity(*model_);  // extra inputs/outputs would be silently ignored by kernels
  OL_CHECK(options_.dequantize_matmul_accuracy_level == 0 ||
               options_.dequantize_matmul_accuracy_level == 4,
           ErrorCode::kInvalidArgument,
           "RuntimeSessionOptions.dequantize_matmul_accuracy_level must be 0 (float) or 4 (int8 "
           "activations), got " +
               std::to_string(options_.dequantize_matmul_accuracy_level));
  OL_CHECK(options_.spin_wait_us >= 0 && options_.spin_wait_us <= 1'000'000,
           ErrorCode::kInvalidArgument,
           "RuntimeSessionOptions.spin_wait_us must be between 0 and 1000000, got " +
               std::to_string(options_.spin_wait_us));
  impl_ = std::make_unique<Impl>(options_.intra_op_threads);
  if (options_.profile) impl_->profile = std::make_unique<NodeProfile>();
}

NodeProfile* RuntimeSession::profile() const { return impl_->profile.get(); }

RuntimeSession::RuntimeSession(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                               RuntimeSessionOptions options)
    : RuntimeSession(std::move(model), options) {
  Cached(context);
}

RuntimeSession::~RuntimeSession() = default;

RuntimeSession::CachedPlan& RuntimeSession::Cached(RuntimeContext& context) const {
  const void* id = context.config_id();
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->plans)
    if (c->Serves(id)) return *c;
  for (auto& c : impl_->plans)
    if (c->EquivalentTo(context)) {
      // A context per call (a server's request) joins here every time: forget the gone ones
      // first, or the list, its scan in Serves and the configurations it keeps alive grow
      // with every call the session ever served.
      c->ForgetGoneUsers();
      c->contexts.push_back({id, context.config_keepalive()});
      return *c;
    }
  // A new plan: first drop the ones no one can reach any more, and forget configurations
  // that are gone (their plans stay while another of their contexts lives).
  std::erase_if(impl_->plans,
                [](const std::unique_ptr<CachedPlan>& c) { return c->Unreachable(); });
  for (auto& c : impl_->plans) c->ForgetGoneUsers();
  auto cached = std::make_unique<CachedPlan>();
  cached->contexts.push_back({id, context.config_keepalive()});
  cached->opsets = context.kernel_ctx().opsets();
  cached->allocator = &context.allocator();
  cached->shareable = context.custom_kernels().empty();
  PlanBuildScope plan_options;
  plan_options.fold_constants = options_.fold_constants;
  plan_options.fuse_subgraphs = options_.fuse_subgraphs;
  plan_options.dequantize_matmul_accuracy_level = options_.dequantize_matmul_accuracy_level;
  cached->plan = GraphPlan::BuildModel(model_, context, std::move(plan_options));
  impl_->plans.push_back(std::move(cached));
  return *impl_->plans.back();
}

RuntimeSession::CachedPlan& RuntimeSession::CachedFor(const GraphPlan& plan) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->plans)
    if (c->plan.get() == &plan) {
      c->running.fetch_add(1, std::memory_order_acq_rel);
      return *c;
    }
  Throw(ErrorCode::kInvalidArgument,
        "RuntimeSession::Execute: the frame's plan is not a plan "
        "of this session");
}

const GraphPlan& RuntimeSession::plan(RuntimeContext& context) const {
  return *Cached(context).plan;
}

size_t RuntimeSession::plan_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->plans.size();
}

std::shared_ptr<const void> RuntimeSession::Attachment(
    const void* key, const std::function<std::shared_ptr<const void>()>& make) const {
  std::lock_guard<std::mutex> lock(impl_->attachment_mu);
  for (const auto& [k, value] : impl_->attachments)
    if (k == key) return value;
  std::shared_ptr<const void> value = make();
  impl_->attachments.emplace_back(key, value);
  return value;
}

RuntimeSessionOptions::ExecutorMode RuntimeSession::executor_for(const GraphPlan& plan) const {
  using Mode = RuntimeSessionOptions::ExecutorMode;
  if (options_.executor != Mode::kAuto) return options_.executor;
  // Task overhead (~µs per node) only pays off with real parallel width and enough nodes.
  constexpr size_t kMinFlowNodes = 8;
  if (impl_->arena.max_concurrency() < 2 || plan.width() < 2 || plan.nodes().size() < kMinFlowNodes)
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
                             const RunOptions& options) const {
  CachedPlan& cached = CachedFor(frame.plan());  // counts this run until it returns
  struct Running {
    CachedPlan& cached;
    ~Running() { cached.running.fetch_sub(1, std::memory_order_acq_rel); }
  } running{cached};
  const GraphPlan& plan = *cached.plan;
  frame.FillDefaults();
  // The spec's fresh child context: shares configuration, allocator and events, and sees
  // only this run's frame.
  RuntimeContext child = context.MakeChild(&frame, options.cancel_requested);
  child.set_binding_leases(options.binding_leases);
  // 0 in the session options means unlimited; in RunOptions it means the process default.
  const size_t limit = options_.max_tensor_bytes == 0 ? std::numeric_limits<size_t>::max()
                                                      : options_.max_tensor_bytes;
  RunOptions run_options;
  run_options.cancel_requested = child.cancel_requested();
  run_options.last_position_outputs = options.last_position_outputs;
  run_options.max_tensor_bytes = limit;
  // Shared with the run's allocations, which refund it when they die (maybe after the run).
  const std::shared_ptr<RunBudget> budget =
      options_.max_run_bytes == 0 ? nullptr : std::make_shared<RunBudget>(options_.max_run_bytes);
  run_options.run_budget = budget.get();
  run_options.profile = impl_->profile.get();
  if (run_options.profile != nullptr) run_options.profile->AddRun();
  if (executor_for(plan) == RuntimeSessionOptions::ExecutorMode::kInline) {
    impl_->arena.execute([&] {
      ScopedMaxTensorBytes scope(limit);
      ScopedRunBudget run_budget(budget.get());
      SpinTeamScope team(std::chrono::microseconds(options_.spin_wait_us));
      ExecuteInline(plan, frame, child, run_options);
    });
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
                                    const RunOptions& options) const {
  return RunSelected(context, std::move(feeds), nullptr, options);
}

RuntimeValueMap RuntimeSession::Run(RuntimeContext& context, RuntimeValueMap feeds,
                                    const std::vector<std::string>& output_names,
                                    const RunOptions& options) const {
  return RunSelected(context, std::move(feeds), &output_names, options);
}

namespace {
std::string QuotedList(std::vector<std::string> names, bool sort) {
  if (sort) std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? std::string("none") : out;
}
}  // namespace

std::vector<int> RuntimeSession::SelectOutputs(const GraphPlan& plan,
                                               const std::vector<std::string>& names) {
  std::vector<int> selected;
  selected.reserve(names.size());
  std::vector<std::string> unknown;
  for (const auto& name : names) {
    int index = -1;
    for (size_t o = 0; o < plan.outputs().size(); ++o)
      if (plan.outputs()[o].name == name) index = static_cast<int>(o);
    if (index < 0)
      unknown.push_back(name);
    else if (std::find(selected.begin(), selected.end(), index) == selected.end())
      selected.push_back(index);
  }
  if (!unknown.empty()) {
    std::vector<std::string> declared;
    for (const auto& out : plan.outputs()) declared.push_back(out.name);
    Throw(ErrorCode::kInvalidArgument, "unknown output name(s) " + QuotedList(unknown, true) +
                                           "; the graph outputs are " +
                                           QuotedList(declared, false));
  }
  return selected;
}

RuntimeValueMap RuntimeSession::RunSelected(RuntimeContext& context, RuntimeValueMap feeds,
                                            const std::vector<std::string>* output_names,
                                            const RunOptions& options) const {
  const GraphPlan& plan = this->plan(context);
  std::vector<int> selected;
  if (output_names != nullptr) selected = SelectOutputs(plan, *output_names);
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
    std::vector<std::string> declared;
    for (const auto& in : plan.inputs()) declared.push_back(in.name);
    Throw(ErrorCode::kInvalidArgument, "unknown feed name(s) " + QuotedList(unknown, true) +
                                           "; the graph inputs are " + QuotedList(declared, false));
  }
  Execute(context, frame, options);
  RuntimeValueMap outputs;
  if (output_names == nullptr) {
    outputs.reserve(plan.outputs().size());
    for (size_t i = 0; i < plan.outputs().size(); ++i)
      outputs[plan.outputs()[i].name] = frame.TakeOutput(i);
  } else {
    outputs.reserve(selected.size());
    for (int i : selected)
      outputs[plan.outputs()[static_cast<size_t>(i)].name] =
          frame.TakeOutput(static_cast<size_t>(i));
  }
  return outputs;
}

}  // namespace onnx_light::core::runtime
