#include "state/persistent_tensor.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "executor/attributes.h"
#include "executor/kernel.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

// Bytes per row along `axis` when the layout can be appended in place, else 0: every
// dimension before the axis is 1, the rows are non-empty and the type is byte-addressable.
size_t AppendRowBytes(const Shape& shape, int64_t axis, DataType dtype) {
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) return 0;
  if (dtype == DataType::kString) return 0;
  const int bits = ElementBits(dtype);
  if (bits <= 0 || bits % 8 != 0) return 0;
  for (int64_t d = 0; d < axis; ++d)
    if (shape[static_cast<size_t>(d)] != 1) return 0;
  size_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d)
    inner *= static_cast<size_t>(shape[d]);
  return inner * static_cast<size_t>(bits / 8);
}

}  // namespace

bool PersistentTensor::Matches(const Tensor& tensor) const {
  return tensor.owner().get() == view_.owner().get() && tensor.raw_data() == view_.raw_data() &&
         tensor.dtype() == view_.dtype() && tensor.shape() == view_.shape() &&
         tensor.nbytes() == view_.nbytes();
}

PersistentTensor::AppendLease::AppendLease(std::string binding, const RuntimeValue* retained,
                                           Capacity capacity, bool exclusive,
                                           size_t initial_capacity)
    : binding_(std::move(binding)),
      retained_(retained),
      capacity_(capacity),
      exclusive_(exclusive),
      initial_capacity_(initial_capacity) {}

PersistentTensor::AppendLease::AppendLease(AppendLease&& other) noexcept
    : binding_(std::move(other.binding_)),
      retained_(other.retained_),
      capacity_(other.capacity_),
      exclusive_(other.exclusive_),
      initial_capacity_(other.initial_capacity_),
      attempted_(other.attempted_.load(std::memory_order_acquire)),
      pending_(std::move(other.pending_)),
      committed_(std::move(other.committed_)) {
  other.retained_ = nullptr;
  other.capacity_ = {};
  other.attempted_.store(true, std::memory_order_release);  // a moved-from lease is spent
}

std::optional<AppendReservation> PersistentTensor::AppendLease::Reserve(
    const RuntimeContext& context, const KernelCall& call, const Tensor& input,
    const Shape& desired, int64_t axis, size_t lease_index) {
  if (attempted_.exchange(true, std::memory_order_acq_rel))
    Throw(ErrorCode::kFailedPrecondition,
          NodeLabel(call.node()) + ": the append lease of persistent binding '" + binding_ +
              "' was already used; a lease accepts one Reserve attempt per run");
  if (initial_capacity_ == 0) return std::nullopt;
  const DataType dtype = input.dtype();
  const Shape& past = input.shape();
  const size_t row_bytes = AppendRowBytes(desired, axis, dtype);
  if (row_bytes == 0 || past.size() != desired.size()) return std::nullopt;
  for (size_t d = 0; d < past.size(); ++d)
    if (static_cast<int64_t>(d) != axis && past[d] != desired[d]) return std::nullopt;
  const auto a = static_cast<size_t>(axis);
  if (past[a] > desired[a]) return std::nullopt;
  const size_t prefix_rows = static_cast<size_t>(past[a]);
  const size_t rows = static_cast<size_t>(desired[a]);

  // The certificate applies only to the very buffer it was issued for, held by the state
  // alone, with an unchanged row layout.
  const bool certified = capacity_.valid() && retained_ != nullptr && retained_->is_tensor() &&
                         retained_->tensor().raw_data() == input.raw_data() &&
                         input.raw_data() == capacity_.base &&
                         input.owner().get() == capacity_.base && capacity_.dtype == dtype &&
                         capacity_.row_bytes == row_bytes;
  std::byte* base = nullptr;
  std::shared_ptr<const void> owner;
  size_t capacity = 0;
  size_t allocated_bytes = 0, prefix_bytes = 0;
  const bool reuse = certified && exclusive_ && rows <= capacity_.capacity;
  if (reuse) {
    // Written only past the valid prefix, in a buffer this class allocated: the const view
    // never observes these rows, so no published byte changes.
    base = static_cast<std::byte*>(const_cast<void*>(capacity_.base));
    owner = input.owner();
    capacity = capacity_.capacity;
  } else {
    capacity = std::max(initial_capacity_, capacity_.valid() ? capacity_.capacity : size_t{0});
    while (capacity < rows) capacity *= 2;
    allocated_bytes = capacity * row_bytes;
    std::shared_ptr<void> storage = context.allocator().Allocate(allocated_bytes);
    base = static_cast<std::byte*>(storage.get());
    prefix_bytes = prefix_rows * row_bytes;
    if (prefix_bytes > 0) std::memcpy(base, input.raw_data(), prefix_bytes);
    owner = std::move(storage);
  }
  if (context.events_enabled()) {  // with events off: no event object, no lock
    RuntimeEvent event;
    event.action = RuntimeEventAction::kPersistentStorage;
    event.node_name = call.node().name();
    event.op_type = call.node().op_type();
    event.storage_allocations = reuse ? 0 : 1;
    event.storage_allocated_bytes = allocated_bytes;
    event.storage_prefix_copied_bytes = prefix_bytes;
    event.storage_reuse_count = reuse ? 1 : 0;
    context.RecordEvent(std::move(event));
  }
  pending_ = Capacity{base, capacity, row_bytes, dtype};
  Tensor candidate = Tensor::Borrow(input.name(), dtype, desired, base, std::move(owner));
  return AppendReservation(
      std::move(candidate),
      std::span<std::byte>(base + prefix_rows * row_bytes, (rows - prefix_rows) * row_bytes),
      lease_index);
}

Tensor PersistentTensor::AppendLease::Commit(const KernelCall& call,
                                             AppendReservation reservation,
                                             size_t initialized_bytes) {
  OL_CHECK(pending_.has_value() && !committed_.has_value(), ErrorCode::kFailedPrecondition,
           NodeLabel(call.node()) + ": no open append reservation for persistent binding '" +
               binding_ + "'");
  const size_t reserved = reservation.writable_bytes().size();
  OL_CHECK(initialized_bytes == reserved, ErrorCode::kInvalidArgument,
           NodeLabel(call.node()) + ": initialized " + std::to_string(initialized_bytes) +
               " bytes of the " + std::to_string(reserved) +
               " reserved for persistent binding '" + binding_ + "'");
  Tensor view = reservation.candidate();
  view.Seal();
  committed_.emplace(view, *pending_);
  return view;
}

std::optional<PersistentTensor::Capacity> PersistentTensor::AppendLease::PublishableCapacity(
    const RuntimeValue& produced) const {
  if (!committed_.has_value() || !produced.is_tensor()) return std::nullopt;
  if (!committed_->Matches(produced.tensor())) return std::nullopt;
  return committed_->capacity();
}

}  // namespace onnx_light::core::runtime
