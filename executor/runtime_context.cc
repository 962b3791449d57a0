#include "executor/runtime_context.h"

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

const char* RuntimeEventActionName(RuntimeEventAction action) {
  switch (action) {
    case RuntimeEventAction::kKernel:
      return "kernel";
    case RuntimeEventAction::kPersistentStorage:
      return "persistent_storage";
    case RuntimeEventAction::kSubgraph:
      return "subgraph";
    case RuntimeEventAction::kFunction:
      return "function";
  }
  return "unknown";
}

RuntimeContext::RuntimeContext(KernelContext kernel_ctx, RuntimeContextOptions options)
    : config_(std::make_shared<Config>(
          Config{std::move(kernel_ctx), options, &DefaultAllocator(), KernelRegistry(), {}})),
      log_(std::make_shared<EventLog>()) {}

RuntimeContext::RuntimeContext(std::shared_ptr<Config> config, std::shared_ptr<EventLog> log,
                               ValueScope* scope, const std::atomic<bool>* cancel)
    : config_(std::move(config)),
      log_(std::move(log)),
      scope_(scope),
      cancel_(cancel),
      is_child_(true) {}

void RuntimeContext::RegisterKernelFn(const std::string& domain, const std::string& op_type,
                                      symbolic::Device device, KernelFactory factory,
                                      int64_t since_version) {
  config_->custom_kernels.Register(domain, op_type, device, std::move(factory), since_version);
}

void RuntimeContext::RegisterKernelFn(const std::string& domain, const std::string& op_type,
                                      symbolic::Device device, NodeKernelFactory factory,
                                      int64_t since_version) {
  RegisterKernelFn(domain, op_type, device,
                   KernelFactory([factory = std::move(factory)](
                                     const NodeProto& node, RuntimeContext& context,
                                     const KernelInfo&) { return factory(node, context); }),
                   since_version);
}

RuntimeContext RuntimeContext::MakeChild(ValueScope* scope, const std::atomic<bool>* cancel) const {
  return RuntimeContext(config_, log_, scope, cancel != nullptr ? cancel : cancel_);
}

bool RuntimeContext::has_value(const std::string& name) const {
  if (scope_ != nullptr) {
    const RuntimeValue* v = scope_->FindValue(name);
    if (v != nullptr && !v->empty()) return true;
  }
  return values_.count(name) != 0;
}

const RuntimeValue& RuntimeContext::get_value(const std::string& name) const {
  if (scope_ != nullptr) {
    const RuntimeValue* v = scope_->FindValue(name);
    if (v != nullptr && !v->empty()) return *v;
  }
  auto it = values_.find(name);
  OL_CHECK(it != values_.end(), ErrorCode::kInvalidArgument,
           "RuntimeContext has no value named '" + name + "'");
  return it->second;
}

void RuntimeContext::put_value(const std::string& name, RuntimeValue value) {
  if (scope_ != nullptr) {
    if (RuntimeValue* v = scope_->FindValue(name)) {
      *v = std::move(value);
      return;
    }
  }
  values_[name] = std::move(value);
}

std::span<std::byte> AppendReservation::writable_bytes() const {
  OL_CHECK(blocks_ == 1, ErrorCode::kFailedPrecondition,
           "the append reservation of '" + candidate_.name() + "' has " + std::to_string(blocks_) +
               " blocks: write each block(b)");
  return block(0);
}

std::optional<AppendReservation> RuntimeContext::ReservePersistentAppend(const KernelCall& call,
                                                                         const Shape& desired,
                                                                         int64_t axis, size_t input,
                                                                         size_t output) const {
  BindingLease* lease = call.append_lease(input, output);
  if (lease == nullptr) return std::nullopt;
  return lease->Reserve(*this, call, call.input(input), desired, axis);
}

Tensor RuntimeContext::CommitPersistentAppend(const KernelCall& call, AppendReservation reservation,
                                              size_t initialized_bytes) const {
  return std::move(reservation).Commit(call, initialized_bytes);
}

PagedTail RuntimeContext::ClaimPagedTail(const KernelCall& call, size_t input,
                                         size_t output) const {
  BindingLease* lease = call.append_lease(input, output);
  return lease == nullptr ? PagedTail::kNone : lease->ClaimPagedTail();
}

PagedTail RuntimeContext::ClaimPagedRowTail(const KernelCall& call, size_t input, size_t output,
                                            size_t row) const {
  BindingLease* lease = call.append_lease(input, output);
  return lease == nullptr ? PagedTail::kNone : lease->ClaimPagedRowTail(row);
}

Tensor AppendReservation::Commit(const KernelCall& call, size_t initialized_bytes) && {
  OL_CHECK(lease_ != nullptr, ErrorCode::kFailedPrecondition,
           NodeLabel(call.node()) + ": the append reservation has no lease (moved from?)");
  BindingLease* lease = lease_;
  lease_ = nullptr;
  return lease->Commit(call, std::move(*this), initialized_bytes);
}

std::optional<AppendReservation> BindingLease::Reserve(const RuntimeContext&, const KernelCall&,
                                                       const Tensor&, const Shape&, int64_t) {
  return std::nullopt;
}

Tensor BindingLease::Commit(const KernelCall& call, AppendReservation, size_t) {
  Throw(ErrorCode::kFailedPrecondition,
        NodeLabel(call.node()) + ": this persistent binding's lease issues no reservations");
}

void RecordStorage(const KernelCall& call, const StorageReport& report) {
  if (!call.has_context() || !call.context().events_enabled()) return;
  RuntimeEvent event;
  event.action = RuntimeEventAction::kPersistentStorage;
  event.node_name = call.node().name();
  event.op_type = call.node().op_type();
  event.storage_allocations = report.allocations;
  event.storage_allocated_bytes = report.allocated_bytes;
  event.storage_prefix_copied_bytes = report.prefix_copied_bytes;
  event.storage_append_copied_bytes = report.append_copied_bytes;
  event.storage_reuse_count = report.reuse_count;
  call.context().RecordEvent(std::move(event));
}

void RuntimeContext::RecordEvent(RuntimeEvent event) const {
  if (!config_->options.events_enabled) return;
  std::lock_guard<std::mutex> lock(log_->mu);
  log_->events.push_back(std::move(event));
}

std::vector<RuntimeEvent> RuntimeContext::events() const {
  std::lock_guard<std::mutex> lock(log_->mu);
  return log_->events;
}

void RuntimeContext::ClearEvents() const {
  std::lock_guard<std::mutex> lock(log_->mu);
  log_->events.clear();
}

}  // namespace onnx_light::core::runtime
