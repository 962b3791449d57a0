// Allocators hand out 64-byte aligned storage as shared owners: bytes stay valid while any
// copy of the owner lives, so an allocator can never recycle a live retained allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace onnx_light::core::runtime {

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
class HeapAllocator final : public Allocator {
 public:
  std::shared_ptr<void> Allocate(size_t bytes) override;
  const char* name() const override { return "heap"; }
  size_t live_bytes() const override { return live_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const override { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
};

HeapAllocator& DefaultAllocator();

}  // namespace onnx_light::core::runtime
