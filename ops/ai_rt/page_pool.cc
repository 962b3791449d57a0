#include "ops/ai_rt/page_pool.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/fault_injection.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define OL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define OL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define OL_POISON(p, n) ((void)(p), (void)(n))
#define OL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace onnx_light::ops::ai_rt {

namespace {

uintptr_t SlabOf(const void* p) {
  return reinterpret_cast<uintptr_t>(p) & ~(PagePool::kSlabBytes - 1);
}

}  // namespace

struct PagePool::State {
  struct Class {
    std::vector<void*> free;  // freed blocks, reused last-in first-out
    char* carve = nullptr;    // the slab blocks are being carved from
    size_t carved = 0;        // bytes of it handed out
  };
  mutable std::mutex mu;
  std::unordered_map<size_t, Class> classes;   // by rounded size
  std::unordered_map<uintptr_t, size_t> live;  // blocks in use, by slab
  size_t slab_bytes = 0, free_bytes = 0;
  size_t max_free_bytes = 0;
};

size_t PagePool::DefaultMaxFreeBytes() {
  return std::max(core::runtime::PhysicalMemoryBytes() / 8, size_t{64} << 20);
}

PagePool::PagePool(size_t max_free_bytes) : state_(std::make_unique<State>()) {
  state_->max_free_bytes = max_free_bytes;
}
PagePool::~PagePool() {
  for (const auto& [slab, count] : state_->live) {
    OL_UNPOISON(reinterpret_cast<void*>(slab), kSlabBytes);
    std::free(reinterpret_cast<void*>(slab));
  }
}

PagePool& PagePool::Instance() {
  static PagePool* pool = new PagePool();
  return *pool;
}

size_t PagePool::slab_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->slab_bytes;
}

size_t PagePool::free_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free_bytes;
}

std::shared_ptr<void> PagePool::Allocate(size_t bytes) {
  if (bytes < kMinBytes || bytes > kMaxBytes) return nullptr;
  core::fault_injection::Check(core::FaultSite::kAllocation);
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  auto charge = core::runtime::RunCharge::Take(bytes);  // before anything is taken
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    State::Class& c = state_->classes[rounded];
    if (!c.free.empty()) {
      p = c.free.back();
      c.free.pop_back();
      state_->free_bytes -= rounded;
    } else {
      if (c.carve == nullptr || c.carved + rounded > kSlabBytes) {
        c.carve = static_cast<char*>(std::aligned_alloc(kSlabBytes, kSlabBytes));
        if (c.carve == nullptr) throw std::bad_alloc();
        core::runtime::AdviseHugePages(c.carve, kSlabBytes);
        OL_POISON(c.carve, kSlabBytes);
        c.carved = 0;
        state_->slab_bytes += kSlabBytes;
      }
      p = c.carve + c.carved;
      c.carved += rounded;
    }
    ++state_->live[SlabOf(p)];
  }
  OL_UNPOISON(p, rounded);
  return std::shared_ptr<void>(p, [this, rounded, charge = std::move(charge)](void* q) mutable {
    charge.Refund();
    Release(q, rounded);
  });
}

void PagePool::Release(void* block, size_t rounded) {
  OL_POISON(block, rounded);
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Class& c = state_->classes[rounded];
  c.free.push_back(block);
  state_->free_bytes += rounded;
  const uintptr_t slab = SlabOf(block);
  if (--state_->live[slab] != 0 || state_->free_bytes <= state_->max_free_bytes ||
      slab == SlabOf(c.carve))
    return;
  // A wholly free slab while many blocks wait: its blocks leave the free list, it is freed.
  state_->live.erase(slab);
  const auto before = c.free.size();
  std::erase_if(c.free, [slab](void* p) { return SlabOf(p) == slab; });
  state_->free_bytes -= (before - c.free.size()) * rounded;
  state_->slab_bytes -= kSlabBytes;
  OL_UNPOISON(reinterpret_cast<void*>(slab), kSlabBytes);
  std::free(reinterpret_cast<void*>(slab));
}

}  // namespace onnx_light::ops::ai_rt
