// RuntimeContext: what a caller configures once and reuses for many calls — the opsets
// (KernelContext), custom kernels, the allocator and the event log. Each run executes in a
// fresh child context (MakeChild) so feeds and intermediates never leak into the caller's
// context: the child shares the configuration, the allocator and the event log, and is bound
// to the run's frame of value slots.
//
// Threading: configuration (RegisterKernelFn, set_allocator) must not change while a call
// runs. RecordEvent is thread safe; events()/ClearEvents() must not race with recording.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "executor/kernel.h"
#include "executor/kernel_registry.h"
#include "executor/persistent_append.h"

namespace onnx_light::core::runtime {

struct RuntimeContextOptions {
  bool events_enabled = false;
};

enum class RuntimeEventAction {
  kKernel,             // one kernel finished (allocator live/peak bytes after it)
  kPersistentStorage,  // a storage report (allocations, prefix/append copies, reuse)
  kSubgraph,           // a control-flow body finished one iteration/branch
  kFunction,           // a model-local function call finished
};
const char* RuntimeEventActionName(RuntimeEventAction action);

struct RuntimeEvent {
  RuntimeEventAction action = RuntimeEventAction::kKernel;
  std::string node_name{};
  std::string op_type{};
  size_t allocated_bytes = 0;  // allocator live bytes when recorded (0 if unknown)
  size_t peak_bytes = 0;       // allocator peak bytes when recorded (0 if unknown)
  size_t storage_allocations = 0;
  size_t storage_allocated_bytes = 0;
  size_t storage_prefix_copied_bytes = 0;
  size_t storage_append_copied_bytes = 0;
  size_t storage_reuse_count = 0;
  int64_t duration_ns = 0;  // kKernel: wall time of the node's Compute (0 if unknown)
};

// What one node did to a persistent tensor's storage: the figures of a kPersistentStorage
// event. Recorded through RecordStorage, the one place such events are made.
struct StorageReport {
  size_t allocations = 0;
  size_t allocated_bytes = 0;
  size_t prefix_copied_bytes = 0;
  size_t append_copied_bytes = 0;
  size_t reuse_count = 0;
};

// Name lookup in the frame a child context is bound to (implemented by the executor).
class ValueScope {
 public:
  virtual ~ValueScope() = default;
  // The slot holding `name` in the current frame, or null when the plan has no such value.
  virtual RuntimeValue* FindValue(const std::string& name) = 0;
};

// The storage types (TensorProto::DataType values: FLOAT, INT8, UINT4, ...) of a paged KV
// cache's key and value pages.
struct KvPageStorage {
  int32_t key = 1, value = 1;
};

class RuntimeContext {
 public:
  explicit RuntimeContext(KernelContext kernel_ctx = KernelContext(18),
                          RuntimeContextOptions options = {});
  virtual ~RuntimeContext() = default;
  RuntimeContext(const RuntimeContext&) = delete;
  RuntimeContext& operator=(const RuntimeContext&) = delete;
  RuntimeContext(RuntimeContext&&) noexcept = default;
  RuntimeContext& operator=(RuntimeContext&&) noexcept = default;

  const KernelContext& kernel_ctx() const { return config_->kernel_ctx; }
  const RuntimeContextOptions& options() const { return config_->options; }
  Allocator& allocator() const { return *config_->allocator; }
  // The allocator kernels use for outputs; it must outlive every session run with it.
  void set_allocator(Allocator& allocator) { config_->allocator = &allocator; }

  // Custom kernels, looked up before the built-ins. Shared with child contexts.
  void RegisterKernelFn(const std::string& domain, const std::string& op_type,
                        symbolic::Device device, KernelFactory factory, int64_t since_version = 1);
  // The same for a factory that needs only the node and the context (the spec's form):
  // [](const NodeProto& node, RuntimeContext& rt) -> std::unique_ptr<KernelBase> {...}.
  using NodeKernelFactory =
      std::function<std::unique_ptr<KernelBase>(const NodeProto& node, RuntimeContext& context)>;
  void RegisterKernelFn(const std::string& domain, const std::string& op_type,
                        symbolic::Device device, NodeKernelFactory factory,
                        int64_t since_version = 1);
  const KernelRegistry& custom_kernels() const { return config_->custom_kernels; }
  // Identity of the shared configuration: equal for a context and all its children.
  const void* config_id() const { return config_.get(); }
  // Keeps the shared configuration (registry, factories) alive, e.g. for a cached plan.
  std::shared_ptr<const void> config_keepalive() const { return config_; }

  // A fresh child: same configuration, allocator and event log; empty values(), bound to
  // `scope` (a run's frame) when given. Cheap: two shared handles, no map copy. The child
  // carries the run's cancellation flag (`cancel`, else this context's) to sub-plans.
  RuntimeContext MakeChild(ValueScope* scope = nullptr,
                           const std::atomic<bool>* cancel = nullptr) const;
  bool is_child() const { return is_child_; }
  const std::atomic<bool>* cancel_requested() const { return cancel_; }

  // Structured values by name. get_value/put_value resolve names to the bound frame's
  // slots first, then fall back to this context's own values() store.
  RuntimeValueMap& values() { return values_; }
  const RuntimeValueMap& values() const { return values_; }
  const RuntimeValue& get_value(const std::string& name) const;  // throws kInvalidArgument
  bool has_value(const std::string& name) const;
  void put_value(const std::string& name, RuntimeValue value);
  ValueScope* scope() const { return scope_; }

  // Events. With events disabled, RecordEvent returns at once (no lock, no allocation).
  bool events_enabled() const { return config_->options.events_enabled; }
  void RecordEvent(RuntimeEvent event) const;
  // A snapshot of the shared log (read only when no context is recording).
  std::vector<RuntimeEvent> events() const;
  void ClearEvents() const;

  // Append reservations (spec "Contiguous CPU Attention feedback"). `input` and `output`
  // are the calling node's input/output positions; the reservation is granted only when the
  // plan recorded them as the node's append site for a binding (the exact bound root-graph
  // input and output, KernelCall::append_lease) and its lease accepts `desired` (the full
  // result shape) growing along `axis`. Without leases (plain sessions, function and subgraph
  // contexts) it returns no reservation at once.
  std::optional<AppendReservation> ReservePersistentAppend(const KernelCall& call,
                                                           const Shape& desired, int64_t axis,
                                                           size_t input, size_t output) const;
  // Checks the initialized byte count, seals the candidate and returns an ordinary
  // read-only view of it (AppendReservation::Commit). This does not publish anything: the
  // state validates and publishes all outputs together after the run.
  Tensor CommitPersistentAppend(const KernelCall& call, AppendReservation reservation,
                                size_t initialized_bytes) const;
  // Paged caches: how the node may extend the bound cache at input position `input` into
  // output position `output` (PagedTail::kNone without a lease or when they are no site).
  PagedTail ClaimPagedTail(const KernelCall& call, size_t input, size_t output) const;
  // The same for batch row `row`'s cache of a bound sequence of paged caches.
  PagedTail ClaimPagedRowTail(const KernelCall& call, size_t input, size_t output,
                              size_t row) const;
  // One lease per persistent binding (null where a binding has none), attached by
  // RuntimeSession::Execute for a state's run; never inherited by MakeChild.
  void set_binding_leases(std::span<BindingLease* const> leases) { binding_leases_ = leases; }
  BindingLease* binding_lease(size_t binding) const {
    return binding < binding_leases_.size() ? binding_leases_[binding] : nullptr;
  }

  // The storage types this context's ai.rt::PagedAttention writes every page in, when its
  // format policy fixes them from the first token (set by whoever registers the kernel with
  // such a policy); unset: the model's declared layout. RequestScheduler's max_kv_bytes
  // charges a token at these sizes. Shared with child contexts.
  void set_kv_page_storage(std::optional<KvPageStorage> storage) {
    config_->kv_page_storage = storage;
  }
  const std::optional<KvPageStorage>& kv_page_storage() const { return config_->kv_page_storage; }

 private:
  struct Config {
    KernelContext kernel_ctx;
    RuntimeContextOptions options;
    Allocator* allocator = &DefaultAllocator();
    KernelRegistry custom_kernels;
    std::optional<KvPageStorage> kv_page_storage;
  };
  struct EventLog {
    std::mutex mu;
    std::vector<RuntimeEvent> events;
  };
  RuntimeContext(std::shared_ptr<Config> config, std::shared_ptr<EventLog> log, ValueScope* scope,
                 const std::atomic<bool>* cancel);

  std::shared_ptr<Config> config_;
  std::shared_ptr<EventLog> log_;
  ValueScope* scope_ = nullptr;
  const std::atomic<bool>* cancel_ = nullptr;
  bool is_child_ = false;
  std::span<BindingLease* const> binding_leases_;
  RuntimeValueMap values_;
};

// Records `report` as a kPersistentStorage event of the call's node; nothing (no event
// object, no lock) when the call has no context or its events are off.
void RecordStorage(const KernelCall& call, const StorageReport& report);

template <class K>
std::unique_ptr<KernelBase> MakeKernel(const NodeProto& node, RuntimeContext& context,
                                       const KernelInfo& info) {
  (void)context;
  std::unique_ptr<K> kernel;
  if constexpr (std::is_constructible_v<K, const KernelInfo&>)
    kernel = std::make_unique<K>(info);
  else
    kernel = std::make_unique<K>(info.kernel_ctx());
  kernel->set_node(node);
  return kernel;
}

}  // namespace onnx_light::core::runtime
