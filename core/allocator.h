// Allocators hand out 64-byte aligned storage as shared owners: bytes stay valid while any
// copy of the owner lives, so an allocator can never recycle a live retained allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace onnx_light::core::runtime {

// A run's memory limit (RuntimeSessionOptions::max_run_bytes): the requested bytes of the
// allocations made while the run executes that are still live, held to `limit`. The
// executor installs it on each thread that runs one of the run's nodes (ScopedRunBudget);
// HeapAllocator and IoArena charge every request against it and refund the bytes when the
// last owner dies, which may be after the run (outputs, retained state): owners share it.
class RunBudget : public std::enable_shared_from_this<RunBudget> {
 public:
  explicit RunBudget(size_t limit) : limit_(limit) {}
  // Throws Error(kResourceExhausted) naming `bytes`, the total and the limit when `bytes`
  // more would pass the limit (nothing is charged then).
  void Charge(size_t bytes);
  void Refund(size_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
};

// One allocation's charge: taken from this thread's budget (none outside a limited run),
// refunded once by Refund() or the destructor. Allocators keep it in the owner's deleter.
class RunCharge {
 public:
  static RunCharge Take(size_t bytes);  // throws as RunBudget::Charge
  RunCharge() = default;
  RunCharge(RunCharge&& other) noexcept = default;
  RunCharge& operator=(RunCharge&&) = delete;
  ~RunCharge() { Refund(); }
  void Refund() {
    if (budget_) budget_->Refund(bytes_);
    budget_.reset();
  }

 private:
  std::shared_ptr<RunBudget> budget_;
  size_t bytes_ = 0;
};

// Installs `budget` (may be null) as this thread's for its lifetime; restores the previous.
class ScopedRunBudget {
 public:
  explicit ScopedRunBudget(RunBudget* budget);
  ~ScopedRunBudget();
  ScopedRunBudget(const ScopedRunBudget&) = delete;
  ScopedRunBudget& operator=(const ScopedRunBudget&) = delete;

 private:
  RunBudget* previous_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns an owner whose get() is the (uninitialised, 64-byte aligned) storage. Thread safe.
  virtual std::shared_ptr<void> Allocate(size_t bytes) = 0;
  virtual const char* name() const = 0;
  // Bytes held by live allocations and their maximum so far (0 when not tracked). Event
  // auditing reports these as allocated_bytes / peak_bytes.
  virtual size_t live_bytes() const { return 0; }
  virtual size_t peak_bytes() const { return 0; }
};

// The process-wide aligned heap allocator. Counts live and peak bytes.
//
// Large blocks (>= kLargeBlockBytes) are kept after their last owner dies, up to
// max_cached_bytes in total, and handed to the next request of the same rounded size: glibc
// maps such blocks with mmap and unmaps them on free, so without the cache every fresh
// multi-MiB result (a decode step's K/V cache) page-faults all its pages in again. Only dead
// allocations are reused, never a live retained one. Blocks of 2 MiB and more are advised
// for transparent huge pages (MADV_HUGEPAGE): packed weights and caches are streamed every
// token, and 2 MiB pages cut their TLB misses (SmolLM2-135M decode about 8% faster).
class HeapAllocator final : public Allocator {
 public:
  static constexpr size_t kLargeBlockBytes = size_t{1} << 20;
  explicit HeapAllocator(size_t max_cached_bytes = size_t{512} << 20);
  ~HeapAllocator() override;
  HeapAllocator(const HeapAllocator&) = delete;
  HeapAllocator& operator=(const HeapAllocator&) = delete;

  std::shared_ptr<void> Allocate(size_t bytes) override;
  const char* name() const override { return "heap"; }
  size_t live_bytes() const override { return live_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const override { return peak_.load(std::memory_order_relaxed); }
  size_t cached_bytes() const;
  uint64_t large_reuses() const { return large_reuses_.load(std::memory_order_relaxed); }
  // Blocks taken from the system (aligned_alloc) rather than from the caches: only these can
  // page-fault fresh memory in, so a steady decode loop should add none.
  uint64_t system_allocations() const {
    return system_allocations_.load(std::memory_order_relaxed);
  }
  // The size a request is served with: 64-byte multiples, large blocks rounded up to 1/8 of
  // their power of two (at most 12.5% slack) so that slowly growing sizes share a block.
  static size_t RoundedSize(size_t bytes);

 private:
  struct LargeCache;
  void Release(void* p, size_t rounded);

  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<uint64_t> large_reuses_{0};
  std::atomic<uint64_t> system_allocations_{0};
  std::unique_ptr<LargeCache> cache_;
};

HeapAllocator& DefaultAllocator();

// Advises the 4 KiB-aligned interior of [p, p + bytes) for transparent huge pages (no-op
// below 2 MiB or off Linux). Blocks read as long streams (weights, caches) then take far
// fewer TLB misses; only 2 MiB ranges wholly inside the block can become huge pages.
void AdviseHugePages(void* p, size_t bytes);

// The machine's physical memory in bytes; 0 when the system does not say. Default budgets
// (packed weights, tensor sizes, memory the page pool keeps) are fractions of it.
size_t PhysicalMemoryBytes();

}  // namespace onnx_light::core::runtime
