// The append-reservation seam between kernels and persistent state (spec "Contiguous CPU
// Attention feedback"). Kernels never include state/.
//
// When the root plan is built, every node that directly reads a bound input and writes its
// bound output is recorded as an append site {input position, output position, binding}
// (GraphPlan::Node::append_sites). PersistentValueState hands the child context of its run
// one BindingLease per binding (RunOptions::binding_leases). A kernel reaches the lease of
// its site through KernelCall::append_lease(input, output), or through
// RuntimeContext::ReservePersistentAppend, which asks the call; a reservation keeps its lease
// and commits through it. A plain RuntimeSession run, and every function or subgraph
// context, has no leases, so the reservation is declined there and the kernel takes its
// ordinary dense path.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "core/tensor.h"

namespace onnx_light::core::runtime {

class BindingLease;
class KernelCall;
class RuntimeContext;

// Space for one append: the kernel initializes every byte of each block's new rows (the
// rows after the valid prefix along the append axis, nothing else), then commits. A cache
// with several (batch, head) blocks before the append axis keeps spare rows in every block,
// so the new rows are `blocks()` separate runs of block_bytes() each. The candidate is a
// read-only view with the desired shape over the certified buffer (strided when there is
// more than one block); its prefix rows already hold the valid prefix.
class AppendReservation {
 public:
  AppendReservation(Tensor candidate, std::byte* first, size_t block_bytes, size_t blocks,
                    size_t block_stride, BindingLease* lease)
      : candidate_(std::move(candidate)),
        first_(first),
        block_bytes_(block_bytes),
        blocks_(blocks),
        block_stride_(block_stride),
        lease_(lease) {}
  AppendReservation(AppendReservation&&) noexcept = default;
  AppendReservation& operator=(AppendReservation&&) noexcept = default;
  AppendReservation(const AppendReservation&) = delete;
  AppendReservation& operator=(const AppendReservation&) = delete;

  size_t blocks() const { return blocks_; }
  size_t block_bytes() const { return block_bytes_; }
  // The new rows of block `b` (row-major over the dimensions before the append axis).
  std::span<std::byte> block(size_t b) const { return {first_ + b * block_stride_, block_bytes_}; }
  // The new rows of a single-block reservation (throws when there are several blocks).
  std::span<std::byte> writable_bytes() const;
  size_t writable_size() const { return blocks_ * block_bytes_; }
  const Tensor& candidate() const { return candidate_; }
  // Checks that `initialized_bytes` covers writable_size() exactly and returns the sealed
  // view, through the lease that issued the reservation. This publishes nothing: the state
  // publishes capacity only if that view is the one the run returns.
  Tensor Commit(const KernelCall& call, size_t initialized_bytes) &&;

 private:
  Tensor candidate_;
  std::byte* first_ = nullptr;
  size_t block_bytes_ = 0, blocks_ = 0, block_stride_ = 0;
  BindingLease* lease_ = nullptr;
};

// What PagedAttention may do with the last page of the bound paged cache it extends.
enum class PagedTail {
  kNone,       // no running state binds this pair: new pages hold just their tokens
  kShared,     // a state's bound pair that aliases may see: append new pages (with capacity)
  kExclusive,  // the state alone held the cache when the run started: the last page's spare
               // rows may be written in place (no alias can observe them)
};

// Where a node appends to a bound pair: its input and output positions and the binding's
// index in the model's persistent_bindings (core::ResolvePersistentBindings order).
struct AppendSite {
  size_t input = 0;
  size_t output = 0;
  size_t binding = 0;
};

// One run's permission for one bound pair, implemented by state/ (PersistentTensor::
// AppendLease for tensors, a paged-tail lease for paged caches). The defaults decline.
class BindingLease {
 public:
  virtual ~BindingLease() = default;
  // The one attempt of a tensor lease: `past` is the tensor the kernel reads as the past,
  // `desired` the full result shape growing along `axis`. No reservation for disabled
  // capacity or an unsupported layout; throws kFailedPrecondition on a second attempt.
  virtual std::optional<AppendReservation> Reserve(const RuntimeContext& context,
                                                   const KernelCall& call, const Tensor& past,
                                                   const Shape& desired, int64_t axis);
  // Called by AppendReservation::Commit for a reservation this lease issued.
  virtual Tensor Commit(const KernelCall& call, AppendReservation reservation,
                        size_t initialized_bytes);
  // Paged caches: what the node may do with the cache's last page (kExclusive once per run).
  virtual PagedTail ClaimPagedTail() { return PagedTail::kNone; }
  // A sequence of paged caches, one per batch row: the same for row `row`'s cache.
  virtual PagedTail ClaimPagedRowTail(size_t row) {
    (void)row;
    return PagedTail::kNone;
  }
};

}  // namespace onnx_light::core::runtime
