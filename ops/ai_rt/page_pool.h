// Storage for the dense page payloads EncodePage makes with the process heap: fixed-size
// blocks carved from 2 MiB-aligned slabs advised for transparent huge pages. A decode step
// makes one 16-row page at a time between the step's other allocations, so heap pages lie
// scattered in 4 KiB pages, and reading a long cache then misses the TLB and restarts the
// hardware prefetchers at every 4 KiB (perf/README.md, "Paged KV decode"). Blocks of a slab
// are consecutive and a freed block is handed to the next request of its size.
#pragma once

#include <cstddef>
#include <memory>

namespace onnx_light::ops::ai_rt {

class PagePool {
 public:
  // Sizes served: 4 KiB (a page of 16 rows of one KV head of 64 FLOAT) to 1 MiB (the heap's
  // large blocks are huge-page advised already), rounded up to 4 KiB.
  static constexpr size_t kMinBytes = size_t{4} << 10;
  static constexpr size_t kMaxBytes = size_t{1} << 20;
  static constexpr size_t kSlabBytes = size_t{2} << 20;
  // Free blocks kept for reuse by default: an eighth of the machine's memory, at least
  // 64 MiB. Past that, wholly free slabs go back to the system. Memory the system hands out
  // afresh is slow to touch (zeroed, and on virtual machines backed by the host only then:
  // 0.1-0.8 GB/s measured here), so a server whose requests come and go must not give back
  // and take again the pages of its working set: a batched decode step that opened a page
  // for every row and layer took 2-4x its usual time doing so (perf/README.md, issue 15).
  static size_t DefaultMaxFreeBytes();

  static PagePool& Instance();  // never destroyed: payloads may outlive main

  // An owner of `bytes` uninitialised, 64-byte aligned bytes, charged to the thread's run
  // budget (core::runtime::RunCharge) like the heap's; null for sizes outside the pool's.
  std::shared_ptr<void> Allocate(size_t bytes);

  size_t slab_bytes() const;  // taken from the system and not returned
  size_t free_bytes() const;  // in blocks waiting for reuse

  explicit PagePool(size_t max_free_bytes = DefaultMaxFreeBytes());
  ~PagePool();  // frees the slabs: every block must be dead (Instance() is never destroyed)
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

 private:
  struct State;
  void Release(void* block, size_t rounded);
  std::unique_ptr<State> state_;
};

}  // namespace onnx_light::ops::ai_rt
