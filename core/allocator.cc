#include "core/allocator.h"

#include <cstdlib>
#include <new>

namespace onnx_light::core::runtime {

std::shared_ptr<void> HeapAllocator::Allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (bytes > SIZE_MAX - kAlign) throw std::bad_alloc();
  const size_t rounded = ((bytes == 0 ? 1 : bytes) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  const size_t live = live_.fetch_add(rounded, std::memory_order_relaxed) + rounded;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return std::shared_ptr<void>(p, [this, rounded](void* q) {
    std::free(q);
    live_.fetch_sub(rounded, std::memory_order_relaxed);
  });
}

HeapAllocator& DefaultAllocator() {
  static HeapAllocator* allocator = new HeapAllocator();  // never destroyed: outlives owners
  return *allocator;
}

}  // namespace onnx_light::core::runtime
