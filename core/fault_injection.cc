#include "core/fault_injection.h"

#include <new>

#include "core/error.h"

namespace onnx_light::core::fault_injection {
namespace {

struct SiteState {
  std::atomic<int64_t> remaining{-1};  // events before the failing one; -1: none armed
  std::atomic<int64_t> count{0};
};

SiteState sites[2];

SiteState& StateOf(FaultSite site) { return sites[static_cast<int>(site)]; }

}  // namespace

namespace detail {
std::atomic<bool> armed{false};

void Hit(FaultSite site) {
  SiteState& s = StateOf(site);
  s.count.fetch_add(1, std::memory_order_relaxed);
  int64_t left = s.remaining.load(std::memory_order_relaxed);
  // Claim the countdown step; only the thread that takes it from 0 to -1 fails.
  while (left >= 0 && !s.remaining.compare_exchange_weak(left, left - 1)) {
  }
  if (left != 0) return;
  if (site == FaultSite::kAllocation) throw std::bad_alloc();
  Throw(ErrorCode::kRuntime, "injected fault (fault_injection::Arm)");
}
}  // namespace detail

void Arm(FaultSite site, int64_t index) {
  SiteState& s = StateOf(site);
  s.count.store(0);
  s.remaining.store(index < 0 ? -1 : index);
  detail::armed.store(true);
}

void Disarm() {
  for (SiteState& s : sites) s.remaining.store(-1);
  detail::armed.store(false);
}

int64_t Count(FaultSite site) { return StateOf(site).count.load(); }

}  // namespace onnx_light::core::fault_injection
