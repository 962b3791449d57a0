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

// Space for one append: the kernel initializes every byte of each block's new rows (the
// rows after the valid prefix along the append axis, nothing else), then commits. A cache
// with several (batch, head) blocks before the append axis keeps spare rows in every block,
// so the new rows are `blocks()` separate runs of block_bytes() each. The candidate is a
// read-only view with the desired shape over the certified buffer (strided when there is
// more than one block); its prefix rows already hold the valid prefix.
class AppendReservation {
 public:
  AppendReservation(Tensor candidate, std::byte* first, size_t block_bytes, size_t blocks,
                    size_t block_stride, size_t lease)
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
  size_t lease() const { return lease_; }  // which lease of the hook issued it

 private:
  Tensor candidate_;
  std::byte* first_ = nullptr;
  size_t block_bytes_ = 0, blocks_ = 0, block_stride_ = 0;
  size_t lease_ = 0;
};

// What PagedAttention may do with the last page of the bound paged cache it extends.
enum class PagedTail {
  kNone,       // no running state binds this pair: new pages hold just their tokens
  kShared,     // a state's bound pair that aliases may see: append new pages (with capacity)
  kExclusive,  // the state alone held the cache when the run started: the last page's spare
               // rows may be written in place (no alias can observe them)
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
                                                   const RuntimeValue* output, const Shape& desired,
                                                   int64_t axis) = 0;
  // Checks that `initialized_bytes` covers writable_size() exactly and returns the sealed
  // view; the state publishes capacity only if that view is the one the run returns.
  virtual Tensor Commit(const KernelCall& call, AppendReservation reservation,
                        size_t initialized_bytes) = 0;
  // Paged caches: what the node reading bound input slot `input` and writing output slot
  // `output` may do with the cache's last page. kExclusive is granted once per pair and run.
  virtual PagedTail ClaimPagedTail(const KernelCall& call, const RuntimeValue* input,
                                   const RuntimeValue* output) {
    (void)call;
    (void)input;
    (void)output;
    return PagedTail::kNone;
  }
};

}  // namespace onnx_light::core::runtime
