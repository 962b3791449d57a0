#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fault_injection.h"

namespace onnx_light::core::runtime {

namespace {
thread_local RunBudget* tls_run_budget = nullptr;
}  // namespace

void RunBudget::Charge(size_t bytes) {
  const size_t before = live_.fetch_add(bytes, std::memory_order_relaxed);
  if (bytes > limit_ || before > limit_ - bytes) {
    live_.fetch_sub(bytes, std::memory_order_relaxed);
    Throw(ErrorCode::kResourceExhausted,
          "allocating " + std::to_string(bytes) + " bytes would bring this run's live " +
              "allocations from " + std::to_string(before) +
              " bytes to more than max_run_bytes = " + std::to_string(limit_));
  }
  const size_t live = before + bytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

RunCharge RunCharge::Take(size_t bytes) {
  RunCharge charge;
  if (tls_run_budget == nullptr) return charge;
  tls_run_budget->Charge(bytes);
  charge.budget_ = tls_run_budget->shared_from_this();
  charge.bytes_ = bytes;
  return charge;
}

ScopedRunBudget::ScopedRunBudget(RunBudget* budget) : previous_(tls_run_budget) {
  tls_run_budget = budget;
}

ScopedRunBudget::~ScopedRunBudget() { tls_run_budget = previous_; }

namespace {

// Small blocks (below kLargeBlockBytes) are cached too: aligned_alloc goes through glibc's
// memalign path, which bypasses the per-thread tcache, so a decode step's dozens of small
// results cost a locked malloc and free each. Dead small blocks wait on per-class free lists
// instead. Classes are exact 64-byte multiples up to 512 bytes, then 8 steps per power of two
// (at most 12.5% slack): a block is allocated with its class size so any request of the class
// can reuse it. live_bytes still counts RoundedSize(bytes), as before.
constexpr size_t kSmallExactBytes = 512;
constexpr size_t kSmallClasses = kSmallExactBytes / 64 + 8 * 11 + 1;  // up to 1 MiB
// Small blocks cached at most: 1/8 of the large budget, capped at 16 MiB.
constexpr size_t kMaxSmallCachedBytes = size_t{16} << 20;

struct SmallClass {
  size_t index;
  size_t bytes;
};

// `rounded` is a 64-byte multiple below kLargeBlockBytes.
SmallClass ClassOf(size_t rounded) {
  if (rounded <= kSmallExactBytes) return {rounded / 64 - 1, rounded};
  size_t log2 = static_cast<size_t>(std::bit_width(rounded)) - 1;  // >= 9
  size_t step = size_t{1} << (log2 - 3);
  size_t k = (rounded + step - 1) / step;  // 8..16
  if (k == 16) {
    ++log2;
    step <<= 1;
    k = 8;
  }
  return {kSmallExactBytes / 64 + (log2 - 9) * 8 + (k - 8), k * step};
}

}  // namespace

// Large blocks (packed weights, caches, prompt activations) are read as long streams: 2 MiB
// pages cut the TLB misses of a decode step's 0.5-1 GB of weight reads, where the kernel
// grants them (transparent huge pages in "madvise" mode, Debian's default). Only the 2 MiB
// ranges that lie wholly inside the block can become huge pages; nothing is rounded up.
constexpr size_t kHugePageAdviceBytes = size_t{2} << 20;

void AdviseHugePages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceBytes) return;
  const uintptr_t page = 4096, begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

size_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

struct HeapAllocator::LargeCache {
  explicit LargeCache(size_t max_bytes)
      : max_bytes(max_bytes), max_small_bytes(std::min(max_bytes / 8, kMaxSmallCachedBytes)) {}
  std::mutex mu;
  size_t max_bytes;
  size_t bytes = 0;                           // guarded by mu
  std::map<size_t, std::vector<void*>> free;  // rounded size -> dead blocks; guarded by mu

  // Guards a free list for a push or pop of a few instructions: cheaper than a std::mutex
  // (no syscall path, one exchange to lock and a store to unlock).
  class SpinLock {
   public:
    void lock() {
      while (locked_.exchange(true, std::memory_order_acquire)) {
        while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
      }
    }
    void unlock() { locked_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> locked_{false};
  };
  // One free list per small class, linked through each dead block's first word.
  struct alignas(64) SmallList {
    SpinLock mu;
    void* head = nullptr;  // guarded by mu
  };
  size_t max_small_bytes;
  // Bytes on small free lists plus in-flight reservations; a block is pushed only after
  // reserving its bytes, so the lists never hold more than max_small_bytes.
  std::atomic<size_t> small_bytes{0};
  std::array<SmallList, kSmallClasses> small;

  void* PopSmall(const SmallClass& c) {
    SmallList& list = small[c.index];
    void* p = nullptr;
    {
      std::lock_guard<SpinLock> lock(list.mu);
      p = list.head;
      if (p != nullptr) list.head = *static_cast<void**>(p);
    }
    if (p != nullptr) small_bytes.fetch_sub(c.bytes, std::memory_order_relaxed);
    return p;
  }

  // False when the bound leaves no room: the caller frees the block.
  bool PushSmall(void* p, const SmallClass& c) {
    const size_t before = small_bytes.fetch_add(c.bytes, std::memory_order_relaxed);
    if (before + c.bytes > max_small_bytes) {
      small_bytes.fetch_sub(c.bytes, std::memory_order_relaxed);
      return false;
    }
    SmallList& list = small[c.index];
    std::lock_guard<SpinLock> lock(list.mu);
    *static_cast<void**>(p) = list.head;
    list.head = p;
    return true;
  }
};

HeapAllocator::HeapAllocator(size_t max_cached_bytes)
    : cache_(std::make_unique<LargeCache>(max_cached_bytes)) {}

HeapAllocator::~HeapAllocator() {
  for (auto& [size, blocks] : cache_->free)
    for (void* p : blocks) std::free(p);
  for (auto& list : cache_->small) {
    while (list.head != nullptr) {
      void* p = list.head;
      list.head = *static_cast<void**>(p);
      std::free(p);
    }
  }
}

size_t HeapAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->bytes + cache_->small_bytes.load(std::memory_order_relaxed);
}

size_t HeapAllocator::RoundedSize(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (bytes > SIZE_MAX / 2) throw std::bad_alloc();
  const size_t aligned = ((bytes == 0 ? 1 : bytes) + kAlign - 1) / kAlign * kAlign;
  if (aligned < kLargeBlockBytes) return aligned;
  const size_t step = std::bit_floor(aligned) / 8;
  return (aligned + step - 1) / step * step;
}

std::shared_ptr<void> HeapAllocator::Allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  fault_injection::Check(FaultSite::kAllocation);
  const size_t rounded = RoundedSize(bytes);
  RunCharge charge = RunCharge::Take(bytes);  // before anything is taken: a refusal undoes nothing
  void* p = nullptr;
  size_t block_bytes = rounded;
  if (rounded < kLargeBlockBytes) {
    const SmallClass c = ClassOf(rounded);
    block_bytes = c.bytes;
    p = cache_->PopSmall(c);
  } else {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->free.find(rounded);
    if (it != cache_->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cache_->bytes -= rounded;
      large_reuses_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (p == nullptr) {
    p = std::aligned_alloc(kAlign, block_bytes);
    system_allocations_.fetch_add(1, std::memory_order_relaxed);
    if (p != nullptr) AdviseHugePages(p, block_bytes);
  }
  if (p == nullptr) throw std::bad_alloc();
  const size_t live = live_.fetch_add(rounded, std::memory_order_relaxed) + rounded;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return std::shared_ptr<void>(p, [this, rounded, charge = std::move(charge)](void* q) mutable {
    charge.Refund();
    Release(q, rounded);
  });
}

void HeapAllocator::Release(void* p, size_t rounded) {
  live_.fetch_sub(rounded, std::memory_order_relaxed);
  if (rounded < kLargeBlockBytes) {
    if (cache_->PushSmall(p, ClassOf(rounded))) return;
  } else {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->bytes + rounded <= cache_->max_bytes) {
      cache_->free[rounded].push_back(p);
      cache_->bytes += rounded;
      return;
    }
  }
  std::free(p);
}

HeapAllocator& DefaultAllocator() {
  static HeapAllocator* heap = new HeapAllocator();  // never destroyed: owners may outlive main
  return *heap;
}

}  // namespace onnx_light::core::runtime
