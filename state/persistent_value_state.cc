#include "state/persistent_value_state.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/persistent_bindings.h"
#include "executor/attributes.h"
#include "executor/graph_plan.h"
#include "onnx_light.pb.h"
#include "state/paged_tail_lease.h"
#include "state/persistent_tensor.h"

namespace onnx_light::core::runtime {

// The published state: one entry per binding (bindings() order), read-only views. Replaced
// as a whole by Publish; never modified after construction. `capacity` is the certified
// append capacity of a tensor (PersistentTensor): set only for buffers an append
// reservation allocated and the run returned unchanged; imported values have none.
struct PersistentValueState::Retained {
  struct Entry {
    RuntimeValue value;
    PersistentTensor::Capacity capacity;
  };
  std::shared_ptr<const std::vector<std::string>> names;  // bound input names
  std::vector<Entry> values;
};

// Per-plan bookkeeping, computed once per kernel configuration (context): which plan
// inputs/outputs the bindings use, and a reusable frame (calls never overlap).
struct PersistentValueState::PlanState {
  const GraphPlan* plan = nullptr;
  std::unique_ptr<RunFrame> frame;
  BoundSlots slots;
  std::vector<int> binding_of_input;   // per plan input: binding index or -1
  std::vector<int> binding_of_output;  // per plan output: binding index or -1
};

// What the state layer derives from the model, resolved and validated once per session
// (RuntimeSession::Attachment) and shared by every state built on it. Immutable.
struct PersistentValueState::Declarations {
  explicit Declarations(const ModelProto& model) : validator(model) {}
  ValueValidator validator;
  std::vector<Binding> bindings;
  std::shared_ptr<const std::vector<std::string>> names;  // bound input names
  std::vector<std::string> feed_names;  // inputs that must come from current feeds
};

class PersistentValueState::CallGuard {
 public:
  CallGuard(PersistentValueState& state, const char* operation) : state_(state) {
    if (state_.busy_.exchange(true, std::memory_order_acq_rel))
      Throw(ErrorCode::kFailedPrecondition,
            std::string("PersistentValueState.") + operation +
                ": another run, reset or close of the same state is in progress (calls on "
                "one state must not overlap; use one state per request)");
  }
  ~CallGuard() { state_.busy_.store(false, std::memory_order_release); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  PersistentValueState& state_;
};

namespace {

// The leases of one run, one per binding (null for values that cannot be appended to). The
// kernels reach them through the append sites the plan recorded (KernelCall::append_lease).
struct RunLeases {
  explicit RunLeases(size_t bindings) : by_binding(bindings, nullptr), tensor_of(bindings, -1) {}
  // Each kind's vector is sized for every binding on its first use (stable addresses:
  // by_binding points into them), so a model without paged caches allocates none for them.
  void AddTensor(size_t b, PersistentTensor::AppendLease lease) {
    if (tensors.capacity() == 0) tensors.reserve(by_binding.size());
    tensor_of[b] = static_cast<int>(tensors.size());
    by_binding[b] = &tensors.emplace_back(std::move(lease));
  }
  void AddPaged(size_t b, PagedTailLease lease) {
    if (paged.capacity() == 0) paged.reserve(by_binding.size());
    by_binding[b] = &paged.emplace_back(std::move(lease));
  }
  std::span<BindingLease* const> span() const {
    return tensors.empty() && paged.empty() ? std::span<BindingLease* const>() : by_binding;
  }
  // The capacity to publish with binding b's produced value (none unless it committed).
  PersistentTensor::Capacity Publishable(size_t b, const RuntimeValue& produced) const {
    if (tensor_of[b] < 0) return {};
    return tensors[static_cast<size_t>(tensor_of[b])].PublishableCapacity(produced).value_or(
        PersistentTensor::Capacity{});
  }

  // Bindings whose append copied the cache only because of an outside reference.
  std::vector<size_t> CopiedForAlias() const {
    std::vector<size_t> out;
    for (size_t b = 0; b < tensor_of.size(); ++b)
      if (tensor_of[b] >= 0 && tensors[static_cast<size_t>(tensor_of[b])].copied_for_alias())
        out.push_back(b);
    return out;
  }

  std::vector<PersistentTensor::AppendLease> tensors;
  std::vector<PagedTailLease> paged;
  std::vector<BindingLease*> by_binding;
  std::vector<int> tensor_of;  // per binding: index into tensors, or -1
};

std::string Quoted(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

const ValueInfoProto* FindValueInfo(const google::protobuf::RepeatedPtrField<ValueInfoProto>& infos,
                                    const std::string& name) {
  for (const auto& vi : infos)
    if (vi.name() == name) return &vi;
  return nullptr;
}

}  // namespace

namespace {

std::shared_ptr<const RuntimeSession> PrivateSession(std::shared_ptr<const ModelProto> model,
                                                     const RuntimeSessionOptions& options) {
  OL_CHECK(model != nullptr, ErrorCode::kInvalidArgument, "PersistentValueState: null model");
  return std::make_shared<RuntimeSession>(std::move(model), options);
}

const char kDeclarationsKey = 0;  // its address keys the session attachment

}  // namespace

PersistentValueState::PersistentValueState(const ModelProto& model, RuntimeValueMap initial,
                                           RuntimeSessionOptions options)
    // Non-owning handle: the caller keeps the model alive (reference constructor contract).
    : PersistentValueState(std::shared_ptr<const ModelProto>(std::shared_ptr<const void>(), &model),
                           std::move(initial), std::move(options)) {}

PersistentValueState::PersistentValueState(std::shared_ptr<const ModelProto> model,
                                           RuntimeValueMap initial, RuntimeSessionOptions options)
    : PersistentValueState(PrivateSession(std::move(model), options), std::move(initial)) {}

PersistentValueState::PersistentValueState(std::shared_ptr<const RuntimeSession> session,
                                           RuntimeValueMap initial)
    : session_(std::move(session)) {
  OL_CHECK(session_ != nullptr, ErrorCode::kInvalidArgument, "PersistentValueState: null session");
  model_ = session_->model_ptr();
  options_ = session_->options();
  declarations_ = Resolve(*session_);
  retained_ = BuildRetained(std::move(initial));
}

PersistentValueState::~PersistentValueState() = default;

std::shared_ptr<const PersistentValueState::Declarations> PersistentValueState::Resolve(
    const RuntimeSession& session) {
  auto shared = session.Attachment(&kDeclarationsKey, [&]() -> std::shared_ptr<const void> {
    const ModelProto& model = session.model();
    const GraphProto& graph = model.graph();
    auto d = std::make_shared<Declarations>(model);
    // The one set of binding rules (core/persistent_bindings.h); nothing is re-checked here.
    std::set<std::string> bound;
    for (const auto& b : core::ResolvePersistentBindings(graph, &model)) {
      bound.insert(b.input_name);
      d->bindings.push_back(
          Binding{b.input_name, b.output_name, &b.input->type(), &b.output->type()});
    }
    auto names = std::make_shared<std::vector<std::string>>();
    for (const auto& b : d->bindings) names->push_back(b.input_name);
    d->names = std::move(names);
    std::set<std::string> defaults;
    for (const auto& init : graph.initializer()) defaults.insert(init.name());
    for (const auto& in : graph.input())
      if (!bound.count(in.name()) && !defaults.count(in.name())) d->feed_names.push_back(in.name());
    return d;
  });
  return std::static_pointer_cast<const Declarations>(shared);
}

std::shared_ptr<const PersistentValueState::Retained> PersistentValueState::BuildRetained(
    RuntimeValueMap initial) const {
  const Declarations& d = *declarations_;
  const std::vector<Binding>& bindings = d.bindings;
  const std::vector<std::string>* names = d.names.get();
  auto next = std::make_shared<Retained>();
  next->values.resize(bindings.size());
  for (auto& [name, value] : initial) {
    auto it = std::find(names->begin(), names->end(), name);
    if (it == names->end()) {
      if (FindValueInfo(model_->graph().input(), name) != nullptr)
        Throw(ErrorCode::kInvalidArgument,
              "initial value '" + name +
                  "' names a graph input that is not persistent; pass it in each call's feeds "
                  "(persistent inputs: " +
                  Quoted(*names) + ")");
      Throw(ErrorCode::kInvalidArgument, "unknown initial value name '" + name +
                                             "'; the persistent inputs are " + Quoted(*names));
    }
    next->values[static_cast<size_t>(it - names->begin())].value = std::move(value);
  }
  for (size_t b = 0; b < bindings.size(); ++b) {
    RuntimeValue& value = next->values[b].value;
    if (value.empty()) value = PagedCacheDefault(bindings[b].input_name);
    if (value.empty())
      Throw(ErrorCode::kInvalidArgument,
            "missing initial value for persistent input '" + bindings[b].input_name +
                "' (every feedback destination needs initial contents: pass it, or declare a "
                "paged_cache_initializer of that name)");
    d.validator.ValidatePersistent(bindings[b].input_name, value, *bindings[b].input_type);
    value = value.BorrowView();  // sealed: retained payloads are read only
  }
  next->names = d.names;
  return next;
}

RuntimeValue PersistentValueState::PagedCacheDefault(const std::string& input_name) const {
  for (const auto& cache : model_->graph().paged_cache_initializer())
    if (cache.name() == input_name)
      // Aliases the model's proto: dense raw pages are borrowed, nothing is copied.
      return RuntimeValue::FromPagedCache(std::shared_ptr<const PagedCacheProto>(model_, &cache),
                                          ParameterCatalogue::FromModel(model_));
  return {};
}

void PersistentValueState::EnsureOpen(const char* operation) const {
  if (closed())
    Throw(ErrorCode::kFailedPrecondition,
          std::string("PersistentValueState.") + operation + ": the state is closed");
}

void PersistentValueState::KeepContext(const RuntimeContext& context) {
  const void* id = context.config_id();
  if (std::find(context_ids_.begin(), context_ids_.end(), id) != context_ids_.end()) return;
  context_ids_.push_back(id);
  contexts_.push_back(context.config_keepalive());
}

PersistentValueState::PlanState& PersistentValueState::PlanFor(RuntimeContext& context) {
  const GraphPlan& plan = session_->plan(context);
  for (auto& p : plans_)
    if (p->plan == &plan) return *p;
  auto ps = std::make_unique<PlanState>();
  ps->plan = &plan;
  ps->frame = std::make_unique<RunFrame>(plan);
  ps->binding_of_input.assign(plan.inputs().size(), -1);
  ps->binding_of_output.assign(plan.outputs().size(), -1);
  const std::vector<Binding>& bindings = declarations_->bindings;
  for (size_t b = 0; b < bindings.size(); ++b) {
    const int in = plan.FindInput(bindings[b].input_name);
    int out = -1;
    for (size_t o = 0; o < plan.outputs().size(); ++o)
      if (plan.outputs()[o].name == bindings[b].output_name) out = static_cast<int>(o);
    OL_CHECK(in >= 0 && out >= 0, ErrorCode::kInvalidModel,
             "persistent binding '" + bindings[b].input_name + "' <- '" + bindings[b].output_name +
                 "' does not match the compiled plan");
    ps->slots.input_index.push_back(in);
    ps->slots.output_index.push_back(out);
    ps->binding_of_input[static_cast<size_t>(in)] = static_cast<int>(b);
    ps->binding_of_output[static_cast<size_t>(out)] = static_cast<int>(b);
  }
  plans_.push_back(std::move(ps));
  return *plans_.back();
}

void PersistentValueState::Publish(std::shared_ptr<const Retained> next) {
  std::shared_ptr<const Retained> old;
  {
    std::lock_guard<std::mutex> lock(retained_mutex_);
    old = std::exchange(retained_, std::move(next));
  }
  // `old` (possibly the last owner of large payloads) is released outside the lock.
}

RuntimeValueMap PersistentValueState::Run(RuntimeContext& context, RuntimeValueMap feeds,
                                          TaskCompletion* completion) {
  return RunSelected(context, std::move(feeds), nullptr, completion, false);
}

RuntimeValueMap PersistentValueState::Run(RuntimeContext& context, RuntimeValueMap feeds,
                                          const std::vector<std::string>& output_names,
                                          TaskCompletion* completion) {
  return RunSelected(context, std::move(feeds), &output_names, completion, false);
}

RuntimeValueMap PersistentValueState::Run(RuntimeContext& context, RuntimeValueMap feeds,
                                          const std::vector<std::string>& output_names,
                                          bool last_position_only, TaskCompletion* completion) {
  return RunSelected(context, std::move(feeds), &output_names, completion, last_position_only);
}

RuntimeValueMap PersistentValueState::RunSelected(RuntimeContext& context, RuntimeValueMap feeds,
                                                  const std::vector<std::string>* output_names,
                                                  TaskCompletion* completion,
                                                  bool last_position_only) {
  CallGuard guard(*this, "run");
  EnsureOpen("run");
  if (completion != nullptr) completion->Attach();
  KeepContext(context);
  PlanState& ps = PlanFor(context);
  const GraphPlan& plan = *ps.plan;
  const Declarations& decl = *declarations_;
  const std::vector<Binding>& bindings = decl.bindings;
  // The outputs handed back (plan output indexes): all, or the named ones.
  std::vector<int> returned;
  if (output_names != nullptr) {
    returned = RuntimeSession::SelectOutputs(plan, *output_names);
  } else {
    returned.resize(plan.outputs().size());
    for (size_t o = 0; o < returned.size(); ++o) returned[o] = static_cast<int>(o);
  }
  RunFrame& frame = *ps.frame;
  // The reused frame is cleared on every exit: no feed or intermediate outlives the call.
  struct ClearFrame {
    RunFrame& frame;
    ~ClearFrame() { frame.Reset(); }
  } clear_frame{frame};

  std::vector<std::string> unknown;
  for (auto& [name, value] : feeds) {
    const int index = plan.FindInput(name);
    if (index < 0) {
      unknown.push_back(name);
      continue;
    }
    if (ps.binding_of_input[static_cast<size_t>(index)] >= 0)
      Throw(ErrorCode::kInvalidArgument,
            "feed '" + name +
                "' would override a retained persistent input; current feeds must not "
                "override retained inputs (use reset() to replace the state)");
    RuntimeSession::CheckFeed(plan, static_cast<size_t>(index), value);
    if (!value.is_tensor()) decl.validator.CheckEncodedReferences(name, value);
    frame.Set(plan.inputs()[static_cast<size_t>(index)].slot, std::move(value));
  }
  if (!unknown.empty()) {
    std::sort(unknown.begin(), unknown.end());
    Throw(ErrorCode::kInvalidArgument,
          "unknown feed name(s) " + Quoted(unknown) + "; the feeds are " + Quoted(decl.feed_names));
  }

  std::shared_ptr<const Retained> current;
  {
    std::lock_guard<std::mutex> lock(retained_mutex_);
    current = retained_;
  }
  // One lease per binding, for the kernel of its append site. Ownership is checked before
  // the frame gets its invocation-local alias: only a value the state alone holds may be
  // appended in place.
  RunLeases leases(bindings.size());
  for (size_t b = 0; b < bindings.size(); ++b) {
    const Retained::Entry& entry = current->values[b];
    if (IsPagedCacheStructure(entry.value) || IsPagedCacheRows(entry.value))
      leases.AddPaged(b, PagedTailLease::Of(entry.value));
    else if (entry.value.is_tensor())
      leases.AddTensor(
          b, PersistentTensor::AppendLease(bindings[b].input_name, &entry.value, entry.capacity,
                                           entry.value.tensor().owner_use_count() == 1,
                                           options_.persistent_tensor_initial_capacity));
  }

  // Forwarding: the frame gets owner handles of the retained values (no payload copy).
  for (size_t b = 0; b < bindings.size(); ++b)
    frame.Set(plan.inputs()[static_cast<size_t>(ps.slots.input_index[b])].slot,
              current->values[b].value);

  // Trimmed to the last position: returned outputs only, never a bound (retained) one.
  std::vector<std::string> last_position;
  if (last_position_only)
    for (int o : returned)
      if (ps.binding_of_output[static_cast<size_t>(o)] < 0)
        last_position.push_back(plan.outputs()[static_cast<size_t>(o)].name);
  RunOptions run_options;
  run_options.cancel_requested = completion ? &completion->cancel_flag() : nullptr;
  run_options.last_position_outputs = last_position.empty() ? nullptr : &last_position;
  run_options.binding_leases = leases.span();
  last_alias_copies_.clear();
  session_->Execute(context, frame, run_options);
  for (size_t b : leases.CopiedForAlias()) last_alias_copies_.push_back(bindings[b].input_name);

  // Every bound output and every returned one leaves the frame; the rest is dropped with it.
  std::vector<RuntimeValue> taken(plan.outputs().size());
  std::vector<bool> is_taken(plan.outputs().size(), false);
  auto take = [&](int o) -> RuntimeValue& {
    const size_t i = static_cast<size_t>(o);
    if (!is_taken[i]) {
      taken[i] = frame.TakeOutput(i);
      is_taken[i] = true;
    }
    return taken[i];
  };

  auto next = std::make_shared<Retained>();
  next->names = current->names;
  next->values.resize(bindings.size());
  for (size_t b = 0; b < bindings.size(); ++b) {
    const Binding& binding = bindings[b];
    RuntimeValue& produced = take(ps.slots.output_index[b]);
    decl.validator.ValidatePersistent(binding.output_name, produced, *binding.output_type);
    if (binding.input_type != binding.output_type)
      decl.validator.ValidatePersistent(binding.input_name, produced, *binding.input_type);
    // Retained and returned handles share one owner; both are read-only views.
    next->values[b].value = produced.BorrowView();
    produced = next->values[b].value;
    // Capacity travels only with the exact candidate the kernel committed.
    next->values[b].capacity = leases.Publishable(b, next->values[b].value);
  }
  RuntimeValueMap outputs;
  outputs.reserve(returned.size());
  for (int o : returned) outputs[plan.outputs()[static_cast<size_t>(o)].name] = std::move(take(o));
  taken.clear();  // outputs not asked for (bound ones stay in `next` only)

  if (completion != nullptr && !completion->TryBeginPublication())
    Throw(ErrorCode::kCancelled, "call cancelled before publication (" + completion->reason() +
                                     "); the previous state is unchanged");
  Publish(std::move(next));
  return outputs;
}

void PersistentValueState::Reset(RuntimeValueMap initial) {
  CallGuard guard(*this, "reset");
  EnsureOpen("reset");
  Publish(BuildRetained(std::move(initial)));
}

void PersistentValueState::Close() {
  CallGuard guard(*this, "close");
  if (closed()) return;
  closed_.store(true, std::memory_order_release);
  Publish(nullptr);
  plans_.clear();
  declarations_.reset();
  contexts_.clear();
  context_ids_.clear();
  model_.reset();
  session_.reset();
}

RuntimeValueMap PersistentValueState::Values() const {
  std::shared_ptr<const Retained> current;
  {
    std::lock_guard<std::mutex> lock(retained_mutex_);
    current = retained_;
  }
  if (current == nullptr)
    Throw(ErrorCode::kFailedPrecondition, "PersistentValueState.values: the state is closed");
  RuntimeValueMap out;
  out.reserve(current->values.size());
  for (size_t b = 0; b < current->values.size(); ++b)
    out.emplace((*current->names)[b], current->values[b].value.BorrowView());
  return out;
}

const ModelProto& PersistentValueState::model() const {
  EnsureOpen("model");
  return *model_;
}

const std::shared_ptr<const ModelProto>& PersistentValueState::model_ptr() const {
  EnsureOpen("model");
  return model_;
}

const std::shared_ptr<const RuntimeSession>& PersistentValueState::session() const {
  EnsureOpen("session");
  return session_;
}

const std::vector<PersistentValueState::Binding>& PersistentValueState::bindings() const {
  static const std::vector<Binding> none;
  return declarations_ != nullptr ? declarations_->bindings : none;
}

const ValueValidator& PersistentValueState::validator() const {
  EnsureOpen("validator");
  return declarations_->validator;
}

std::vector<std::string> PersistentValueState::feed_names() const {
  EnsureOpen("feed_names");
  return declarations_->feed_names;
}

size_t PersistentValueState::retained_context_count() const { return contexts_.size(); }

}  // namespace onnx_light::core::runtime
