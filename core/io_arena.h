// IoArena: a thread-safe pooling allocator for I/O and state buffers (feeds, outputs, cache
// pages) that are allocated and released at every call.
//
// Requests are rounded up to power-of-two size classes (>= 64 bytes, 64-byte aligned) and
// released blocks wait on a per-class free list for the next request of that class. A block
// returns to its free list only when the LAST owner of the allocation dies (the shared_ptr
// deleter), so a live retained allocation can never be recycled. Blocks hold a reference to
// the arena's pool: allocations may outlive the IoArena object itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/allocator.h"

namespace onnx_light::core::runtime {

class IoArena final : public Allocator {
 public:
  struct Stats {
    uint64_t allocations = 0;         // Allocate() calls
    uint64_t reuses = 0;              // ... served from a free list
    uint64_t system_allocations = 0;  // ... served by a fresh aligned heap block
    uint64_t requested_bytes = 0;     // sum of requested sizes (before rounding)
    size_t live_bytes = 0;            // size-class bytes held by live allocations
    size_t peak_bytes = 0;            // maximum of live_bytes
    size_t cached_bytes = 0;          // size-class bytes waiting on free lists
  };

  // Free blocks beyond `max_cached_bytes` go back to the heap instead of a free list.
  explicit IoArena(size_t max_cached_bytes = SIZE_MAX);
  ~IoArena() override;
  IoArena(const IoArena&) = delete;
  IoArena& operator=(const IoArena&) = delete;

  std::shared_ptr<void> Allocate(size_t bytes) override;
  const char* name() const override { return "io_arena"; }
  size_t live_bytes() const override;
  size_t peak_bytes() const override;

  Stats stats() const;
  // Returns every cached free block to the heap (live allocations are untouched).
  void Trim();

  // The size class serving `bytes`: the next power of two, at least 64.
  static size_t SizeClass(size_t bytes);

  struct Pool;

 private:
  std::shared_ptr<Pool> pool_;
};

}  // namespace onnx_light::core::runtime
