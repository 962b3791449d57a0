#include "core/io_arena.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "core/fault_injection.h"

namespace onnx_light::core::runtime {

namespace {
constexpr size_t kMinClassShift = 6;  // 64 bytes: the alignment every allocator guarantees
constexpr size_t kClasses = 64;
}  // namespace

// Shared by the arena and every block it handed out, so that a block released after the
// arena died still has a valid place to go.
struct IoArena::Pool {
  struct FreeList {
    std::mutex mutex;
    std::vector<void*> blocks;
  };

  explicit Pool(size_t max_cached) : max_cached_bytes(max_cached) {}
  ~Pool() { Trim(); }

  void Trim() {
    for (size_t c = 0; c < kClasses; ++c) {
      std::vector<void*> blocks;
      {
        std::lock_guard<std::mutex> lock(lists[c].mutex);
        blocks.swap(lists[c].blocks);
      }
      cached_bytes.fetch_sub(blocks.size() * (size_t{1} << c), std::memory_order_relaxed);
      for (void* p : blocks) std::free(p);
    }
  }

  // Called by the deleter of the last owner of a block.
  void Release(void* p, size_t cls) {
    const size_t bytes = size_t{1} << cls;
    live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    // Reserve cache room first so that concurrent releases never exceed the cap.
    size_t cached = cached_bytes.load(std::memory_order_relaxed);
    do {
      if (cached > max_cached_bytes || max_cached_bytes - cached < bytes) {
        std::free(p);
        return;
      }
    } while (
        !cached_bytes.compare_exchange_weak(cached, cached + bytes, std::memory_order_relaxed));
    std::lock_guard<std::mutex> lock(lists[cls].mutex);
    lists[cls].blocks.push_back(p);
  }

  const size_t max_cached_bytes;
  FreeList lists[kClasses];
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> reuses{0};
  std::atomic<uint64_t> system_allocations{0};
  std::atomic<uint64_t> requested_bytes{0};
  std::atomic<size_t> live_bytes{0};
  std::atomic<size_t> peak_bytes{0};
  std::atomic<size_t> cached_bytes{0};
};

IoArena::IoArena(size_t max_cached_bytes) : pool_(std::make_shared<Pool>(max_cached_bytes)) {}

IoArena::~IoArena() { pool_->Trim(); }

size_t IoArena::SizeClass(size_t bytes) {
  if (bytes > (size_t{1} << (kClasses - 1))) throw std::bad_alloc();
  return std::max(std::bit_ceil(bytes), size_t{1} << kMinClassShift);
}

std::shared_ptr<void> IoArena::Allocate(size_t bytes) {
  fault_injection::Check(FaultSite::kAllocation);
  const size_t class_bytes = SizeClass(bytes);
  const size_t cls = static_cast<size_t>(std::countr_zero(class_bytes));
  RunCharge charge = RunCharge::Take(bytes);  // before anything is taken: a refusal undoes nothing
  Pool& pool = *pool_;
  pool.allocations.fetch_add(1, std::memory_order_relaxed);
  pool.requested_bytes.fetch_add(bytes, std::memory_order_relaxed);

  void* p = nullptr;
  {
    Pool::FreeList& list = pool.lists[cls];
    std::lock_guard<std::mutex> lock(list.mutex);
    if (!list.blocks.empty()) {
      p = list.blocks.back();
      list.blocks.pop_back();
    }
  }
  if (p != nullptr) {
    pool.cached_bytes.fetch_sub(class_bytes, std::memory_order_relaxed);
    pool.reuses.fetch_add(1, std::memory_order_relaxed);
  } else {
    p = std::aligned_alloc(size_t{1} << kMinClassShift, class_bytes);
    if (p == nullptr) throw std::bad_alloc();
    pool.system_allocations.fetch_add(1, std::memory_order_relaxed);
  }

  const size_t live =
      pool.live_bytes.fetch_add(class_bytes, std::memory_order_relaxed) + class_bytes;
  size_t peak = pool.peak_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !pool.peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  // If the control block cannot be allocated, shared_ptr runs the deleter: the block goes
  // back to the pool rather than leaking.
  return std::shared_ptr<void>(p, [pool = pool_, cls, charge = std::move(charge)](void* q) mutable {
    charge.Refund();
    pool->Release(q, cls);
  });
}

size_t IoArena::live_bytes() const { return pool_->live_bytes.load(std::memory_order_relaxed); }
size_t IoArena::peak_bytes() const { return pool_->peak_bytes.load(std::memory_order_relaxed); }

IoArena::Stats IoArena::stats() const {
  Stats s;
  s.allocations = pool_->allocations.load(std::memory_order_relaxed);
  s.reuses = pool_->reuses.load(std::memory_order_relaxed);
  s.system_allocations = pool_->system_allocations.load(std::memory_order_relaxed);
  s.requested_bytes = pool_->requested_bytes.load(std::memory_order_relaxed);
  s.live_bytes = pool_->live_bytes.load(std::memory_order_relaxed);
  s.peak_bytes = pool_->peak_bytes.load(std::memory_order_relaxed);
  s.cached_bytes = pool_->cached_bytes.load(std::memory_order_relaxed);
  return s;
}

void IoArena::Trim() { pool_->Trim(); }

}  // namespace onnx_light::core::runtime
