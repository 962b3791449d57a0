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

// The append layout of `shape` along `axis`: `blocks` (the product of the dimensions before
// the axis) runs of rows, each row `row_bytes` (the dimensions after it). Zero row bytes
// when it cannot be appended in place: empty rows or blocks, or a type that is not
// byte-addressable.
struct AppendLayout {
  size_t blocks = 0;
  size_t row_elems = 0;
  size_t row_bytes = 0;
};

AppendLayout LayoutOf(const Shape& shape, int64_t axis, DataType dtype) {
  AppendLayout layout;
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) return layout;
  if (dtype == DataType::kString) return layout;
  const int bits = ElementBits(dtype);
  if (bits <= 0 || bits % 8 != 0) return layout;
  layout.blocks = 1;
  for (size_t d = 0; d < static_cast<size_t>(axis); ++d)
    layout.blocks *= static_cast<size_t>(shape[d]);
  layout.row_elems = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d)
    layout.row_elems *= static_cast<size_t>(shape[d]);
  layout.row_bytes = layout.blocks == 0 ? 0 : layout.row_elems * static_cast<size_t>(bits / 8);
  return layout;
}

// A view of `shape` over a buffer of `blocks` x `capacity` rows: dense when there is one
// block, else strided (each block's rows start capacity rows after the previous block's).
Tensor CapacityView(const std::string& name, DataType dtype, const Shape& shape, int64_t axis,
                    size_t capacity, const AppendLayout& layout, const std::byte* base,
                    std::shared_ptr<const void> owner) {
  if (layout.blocks == 1) return Tensor::Borrow(name, dtype, shape, base, std::move(owner));
  Shape strides(shape.size(), 1);
  const auto a = static_cast<size_t>(axis);
  for (size_t d = shape.size() - 1; d > a; --d) strides[d - 1] = strides[d] * shape[d];
  int64_t block_stride = static_cast<int64_t>(capacity * layout.row_elems);
  for (size_t d = a; d-- > 0;) {
    strides[d] = block_stride;
    block_stride *= shape[d];
  }
  return Tensor::StridedView(name, dtype, shape, std::move(strides), base, std::move(owner));
}

}  // namespace

bool PersistentTensor::Matches(const Tensor& tensor) const {
  return tensor.owner().get() == view_.owner().get() &&
         tensor.strided_data() == view_.strided_data() && tensor.dtype() == view_.dtype() &&
         tensor.shape() == view_.shape() && tensor.strides() == view_.strides() &&
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
      copied_for_alias_(other.copied_for_alias_),
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
    const Shape& desired, int64_t axis) {
  if (attempted_.exchange(true, std::memory_order_acq_rel))
    Throw(ErrorCode::kFailedPrecondition,
          NodeLabel(call.node()) + ": the append lease of persistent binding '" + binding_ +
              "' was already used; a lease accepts one Reserve attempt per run");
  if (initial_capacity_ == 0) return std::nullopt;
  const DataType dtype = input.dtype();
  const Shape& past = input.shape();
  const AppendLayout layout = LayoutOf(desired, axis, dtype);
  const size_t row_bytes = layout.row_bytes;
  if (row_bytes == 0 || past.size() != desired.size()) return std::nullopt;
  for (size_t d = 0; d < past.size(); ++d)
    if (static_cast<int64_t>(d) != axis && past[d] != desired[d]) return std::nullopt;
  const auto a = static_cast<size_t>(axis);
  if (past[a] > desired[a]) return std::nullopt;
  // The prefix is copied block by block: each block of the past must be dense from the axis.
  if (!input.DenseFrom(axis)) return std::nullopt;
  const size_t prefix_rows = static_cast<size_t>(past[a]);
  const size_t rows = static_cast<size_t>(desired[a]);

  // The certificate applies only to the very buffer it was issued for, held by the state
  // alone, with an unchanged block and row layout.
  const bool certified = capacity_.valid() && retained_ != nullptr && retained_->is_tensor() &&
                         retained_->tensor().strided_data() == input.strided_data() &&
                         input.strided_data() == capacity_.base &&
                         input.owner().get() == capacity_.base && capacity_.dtype == dtype &&
                         capacity_.row_bytes == row_bytes && capacity_.blocks == layout.blocks;
  std::byte* base = nullptr;
  std::shared_ptr<const void> owner;
  size_t capacity = 0;
  size_t allocated_bytes = 0, prefix_bytes = 0;
  const bool reuse = certified && exclusive_ && rows <= capacity_.capacity;
  copied_for_alias_ = certified && !exclusive_ && rows <= capacity_.capacity;
  if (reuse) {
    // Written only past each block's valid prefix, in a buffer this class allocated: the
    // const views never observe these rows, so no published byte changes.
    base = static_cast<std::byte*>(const_cast<void*>(capacity_.base));
    owner = input.owner();
    capacity = capacity_.capacity;
  } else {
    capacity = std::max(initial_capacity_, capacity_.valid() ? capacity_.capacity : size_t{0});
    while (capacity < rows) capacity *= 2;
    allocated_bytes = layout.blocks * capacity * row_bytes;
    std::shared_ptr<void> storage = context.allocator().Allocate(allocated_bytes);
    base = static_cast<std::byte*>(storage.get());
    const size_t block_prefix = prefix_rows * row_bytes;
    if (block_prefix > 0) {
      const auto* src = static_cast<const std::byte*>(input.strided_data());
      const size_t elem = row_bytes / layout.row_elems;
      for (size_t b = 0; b < layout.blocks; ++b) {
        const auto offset = static_cast<size_t>(input.BlockOffset(axis, static_cast<int64_t>(b)));
        std::memcpy(base + b * capacity * row_bytes, src + offset * elem, block_prefix);
      }
    }
    prefix_bytes = layout.blocks * block_prefix;
    owner = std::move(storage);
  }
  RecordStorage(call, {.allocations = reuse ? size_t{0} : size_t{1},
                       .allocated_bytes = allocated_bytes,
                       .prefix_copied_bytes = prefix_bytes,
                       .reuse_count = reuse ? size_t{1} : size_t{0}});
  pending_ = Capacity{base, capacity, row_bytes, dtype, layout.blocks};
  Tensor candidate =
      CapacityView(input.name(), dtype, desired, axis, capacity, layout, base, std::move(owner));
  return AppendReservation(std::move(candidate), base + prefix_rows * row_bytes,
                           (rows - prefix_rows) * row_bytes, layout.blocks, capacity * row_bytes,
                           this);
}

Tensor PersistentTensor::AppendLease::Commit(const KernelCall& call, AppendReservation reservation,
                                             size_t initialized_bytes) {
  OL_CHECK(pending_.has_value() && !committed_.has_value(), ErrorCode::kFailedPrecondition,
           NodeLabel(call.node()) + ": no open append reservation for persistent binding '" +
               binding_ + "'");
  const size_t reserved = reservation.writable_size();
  OL_CHECK(initialized_bytes == reserved, ErrorCode::kInvalidArgument,
           NodeLabel(call.node()) + ": initialized " + std::to_string(initialized_bytes) +
               " bytes of the " + std::to_string(reserved) + " reserved for persistent binding '" +
               binding_ + "'");
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
