// A test hook that makes one chosen allocation or one chosen node fail, so a test can prove
// that a failure at any point of a run leaves a state's values untouched and the next run
// working (issue 16's fault injection). Disarmed, a site costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>

namespace onnx_light::core {

enum class FaultSite {
  kAllocation = 0,  // HeapAllocator / IoArena::Allocate throws std::bad_alloc
  kNode = 1,        // a node throws core::Error(kRuntime) before its kernel runs
};

namespace fault_injection {

// The `index`-th event (0-based) at `site` from now fails, once; then the site only counts.
// A negative index only counts (to learn how many events a run has).
void Arm(FaultSite site, int64_t index);
void Disarm();
// Events seen at `site` since it was armed.
int64_t Count(FaultSite site);

namespace detail {
extern std::atomic<bool> armed;
void Hit(FaultSite site);
}  // namespace detail

// Called at every site; throws when the armed event is reached.
inline void Check(FaultSite site) {
  if (detail::armed.load(std::memory_order_relaxed)) detail::Hit(site);
}

}  // namespace fault_injection
}  // namespace onnx_light::core
