#include "ops/math/weight_slab.h"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>
#include <new>

#include "core/allocator.h"

namespace onnx_light::ops::math {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kSlabBytes = size_t{32} << 20;
constexpr size_t kMinSlabBlock = size_t{1} << 20;  // smaller packs gain little from huge pages

struct Slabs {
  std::mutex mu;
  std::weak_ptr<void> slab;  // the slab blocks are carved from now, while alive (guarded by mu)
  char* next = nullptr;      // its first free byte
  char* end = nullptr;
};

Slabs& TheSlabs() {
  static Slabs* slabs = new Slabs;  // never destroyed: packs may die during static teardown
  return *slabs;
}

// Mapped directly, so not in the default allocator's live bytes (math::PackedWeightBytes()
// counts the packs themselves).
std::shared_ptr<void> MapSlab(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  core::runtime::AdviseHugePages(p, bytes);
  return std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); });
}

}  // namespace

std::shared_ptr<void> AllocateWeightStorage(size_t bytes) {
  auto& heap = core::runtime::DefaultAllocator();
  if (bytes < kMinSlabBlock || bytes > kSlabBytes) return heap.Allocate(bytes);
  const size_t rounded = (bytes + 63) & ~size_t{63};
  Slabs& s = TheSlabs();
  std::lock_guard<std::mutex> lock(s.mu);
  std::shared_ptr<void> slab = s.slab.lock();
  if (slab == nullptr || static_cast<size_t>(s.end - s.next) < rounded) {
    // Fresh pages, advised before the first touch (a block recycled by the heap may already
    // be backed by 4 KiB pages); one huge page more than the slab: its 2 MiB-aligned
    // interior holds kSlabBytes.
    slab = MapSlab(kSlabBytes + kHugePage);
    s.slab = slab;
    const auto base = reinterpret_cast<uintptr_t>(slab.get());
    s.next = reinterpret_cast<char*>((base + kHugePage - 1) & ~(kHugePage - 1));
    s.end = s.next + kSlabBytes;
  }
  // Aliases the slab: the block keeps it alive.
  std::shared_ptr<void> block(slab, s.next);
  s.next += rounded;
  return block;
}

}  // namespace onnx_light::ops::math
