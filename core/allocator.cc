#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace onnx_light::core::runtime {

struct HeapAllocator::LargeCache {
  explicit LargeCache(size_t max_bytes) : max_bytes(max_bytes) {}
  std::mutex mu;
  size_t max_bytes;
  size_t bytes = 0;                               // guarded by mu
  std::map<size_t, std::vector<void*>> free;      // rounded size -> dead blocks; guarded by mu
};

HeapAllocator::HeapAllocator(size_t max_cached_bytes)
    : cache_(std::make_unique<LargeCache>(max_cached_bytes)) {}

HeapAllocator::~HeapAllocator() {
  for (auto& [size, blocks] : cache_->free)
    for (void* p : blocks) std::free(p);
}

size_t HeapAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->bytes;
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
  const size_t rounded = RoundedSize(bytes);
  void* p = nullptr;
  if (rounded >= kLargeBlockBytes) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->free.find(rounded);
    if (it != cache_->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cache_->bytes -= rounded;
      large_reuses_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (p == nullptr) p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  const size_t live = live_.fetch_add(rounded, std::memory_order_relaxed) + rounded;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return std::shared_ptr<void>(p, [this, rounded](void* q) { Release(q, rounded); });
}

void HeapAllocator::Release(void* p, size_t rounded) {
  live_.fetch_sub(rounded, std::memory_order_relaxed);
  if (rounded >= kLargeBlockBytes) {
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
