// PersistentTensor: a retained tensor plus the append capacity the runtime certified for it
// (spec "Contiguous CPU Attention feedback"). It composes an ordinary Tensor; it does not
// inherit from it, so copies and views of the tensor never carry capacity or write access.
//
// AppendLease: one run's permission to append to one bound tensor (a BindingLease,
// executor/persistent_append.h), reached by the kernel of the binding's append site (the node
// that directly consumes the bound input and produces the bound output, recorded when the
// plan was built) through RuntimeContext::ReservePersistentAppend. Move-only, one Reserve
// attempt per lease; the reservation commits through it.
//
// Layout: a reservation is granted when the rows after the append axis and the blocks
// before it (the product of those dimensions) are non-empty. The buffer holds `capacity`
// rows per block (for Attention K/V [batch, heads, length, head_size]: one block per
// (batch, head), head-major); the tensor covers the valid rows only, as a dense tensor for
// one block and as a strided view (core/tensor.h) for several. Appending within capacity
// writes only the new rows of each block in place; otherwise a new buffer of geometrically
// grown capacity is allocated and each block's valid prefix is copied once.
//
// Reuse is conservative: only buffers this class allocated are ever written, and only while
// the state is the sole holder of the retained tensor when the run starts (no live previous
// output, Values() view or other state shares it). Imported tensors (NumPy, DLPack, Reset,
// returned outputs) carry no certificate: their first append allocates a new buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "executor/persistent_append.h"

namespace onnx_light::core::runtime {

class KernelCall;
class RuntimeContext;

class PersistentTensor {
 public:
  // What the runtime certified about the buffer of a tensor it allocated for appends.
  struct Capacity {
    const void* base = nullptr;  // start of the certified buffer (its owner's pointer)
    size_t capacity = 0;         // rows along the append axis
    size_t row_bytes = 0;        // bytes of one row (product of the dims after the axis)
    DataType dtype = DataType::kUndefined;
    size_t blocks = 1;  // runs of rows: the product of the dims before the axis
    bool valid() const { return base != nullptr && capacity > 0; }
  };

  PersistentTensor() = default;
  // An imported tensor: retained bytes, no certified capacity.
  explicit PersistentTensor(Tensor view) : view_(std::move(view)) {}
  PersistentTensor(Tensor view, Capacity capacity) : view_(std::move(view)), capacity_(capacity) {}

  const Tensor& view() const { return view_; }
  const Capacity& capacity() const { return capacity_; }
  // True when `tensor` is exactly this candidate: same owner, pointer, type, shape and
  // logical byte extent (the condition for publishing its capacity).
  bool Matches(const Tensor& tensor) const;

  class AppendLease;  // defined below, once PersistentTensor is complete

 private:
  Tensor view_;
  Capacity capacity_;
};

class PersistentTensor::AppendLease final : public BindingLease {
 public:
  // `retained` (owned by the caller for the whole run) is the bound input's retained
  // value; `capacity` its certificate; `exclusive` whether the state was its only holder
  // when the run started. `initial_capacity` 0 declines every reservation.
  AppendLease(std::string binding, const RuntimeValue* retained, Capacity capacity, bool exclusive,
              size_t initial_capacity);
  AppendLease(AppendLease&& other) noexcept;
  AppendLease& operator=(AppendLease&&) = delete;
  AppendLease(const AppendLease&) = delete;
  AppendLease& operator=(const AppendLease&) = delete;

  // The one attempt of this lease. `past` is the tensor the kernel reads as the past;
  // `desired` the full result shape growing along `axis`. Returns no reservation for
  // disabled capacity or an unsupported layout; throws kFailedPrecondition on a second
  // attempt. Records a kPersistentStorage event (allocation, prefix copy or reuse) when
  // the context's events are enabled.
  std::optional<AppendReservation> Reserve(const RuntimeContext& context, const KernelCall& call,
                                           const Tensor& past, const Shape& desired,
                                           int64_t axis) override;
  // Checks the initialized byte count and records the sealed candidate.
  Tensor Commit(const KernelCall& call, AppendReservation reservation,
                size_t initialized_bytes) override;

  // The capacity to publish with `produced`, when it is still the committed candidate.
  std::optional<Capacity> PublishableCapacity(const RuntimeValue& produced) const;
  // Whether Reserve copied the prefix into a new buffer although the certified one had room:
  // the state was not the value's only holder when the run started.
  bool copied_for_alias() const { return copied_for_alias_; }

 private:
  std::string binding_;
  const RuntimeValue* retained_ = nullptr;
  Capacity capacity_;
  bool exclusive_ = false;
  bool copied_for_alias_ = false;
  size_t initial_capacity_ = 0;
  std::atomic<bool> attempted_{false};
  std::optional<Capacity> pending_;
  std::optional<PersistentTensor> committed_;
};

}  // namespace onnx_light::core::runtime
