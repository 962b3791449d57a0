// The append-reservation seam between kernels and persistent state (spec "Contiguous CPU
// Attention feedback"). Kernels never include state/: they call
// RuntimeContext::ReservePersistentAppend / CommitPersistentAppend, which forward to the
// PersistentAppendHook that PersistentValueState attaches to the child context of its own
// runs. A plain RuntimeSession run, and every function or subgraph context, has no hook, so
// the reservation is declined there and the kernel takes its ordinary dense path.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "core/tensor.h"

namespace onnx_light::core::runtime {

class KernelCall;
class RuntimeContext;
class RuntimeValue;

// Space for one append: the kernel initializes every byte of writable_bytes() (the new rows
// along the append axis, nothing else), then commits. The candidate is a read-only view with
// the desired shape over the certified buffer; its prefix rows already hold the valid prefix.
class AppendReservation {
 public:
  AppendReservation(Tensor candidate, std::span<std::byte> writable, size_t lease)
      : candidate_(std::move(candidate)), writable_(writable), lease_(lease) {}
  AppendReservation(AppendReservation&&) noexcept = default;
  AppendReservation& operator=(AppendReservation&&) noexcept = default;
  AppendReservation(const AppendReservation&) = delete;
  AppendReservation& operator=(const AppendReservation&) = delete;

  std::span<std::byte> writable_bytes() const { return writable_; }
  const Tensor& candidate() const { return candidate_; }
  size_t lease() const { return lease_; }  // which lease of the hook issued it

 private:
  Tensor candidate_;
  std::span<std::byte> writable_;
  size_t lease_ = 0;
};

// Implemented by state/ (PersistentValueState). One hook per state run; its leases are
// matched by the exact frame slots of the bound input and output.
class PersistentAppendHook {
 public:
  virtual ~PersistentAppendHook() = default;
  // `input`/`output` are the frame slots the calling node reads and writes. Returns no
  // reservation when they are not a bound pair or the lease declines (disabled capacity,
  // unsupported layout). Throws when the pair's lease was already attempted.
  virtual std::optional<AppendReservation> Reserve(const RuntimeContext& context,
                                                   const KernelCall& call,
                                                   const RuntimeValue* input,
                                                   const RuntimeValue* output,
                                                   const Shape& desired, int64_t axis) = 0;
  // Checks that `initialized_bytes` covers writable_bytes() exactly and returns the sealed
  // view; the state publishes capacity only if that view is the one the run returns.
  virtual Tensor Commit(const KernelCall& call, AppendReservation reservation,
                        size_t initialized_bytes) = 0;
};

}  // namespace onnx_light::core::runtime
