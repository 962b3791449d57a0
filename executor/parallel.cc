#include "executor/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/resource.h>
#endif

namespace onnx_light::core::runtime {

namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

using Clock = std::chrono::steady_clock;

// When a helper last found its core wanted by someone else (process-wide, as nanoseconds of
// Clock). A helper switched out while it holds a piece stalls the owner for a whole time
// slice, and one spinning on a core other work needs takes that core from it: on a busy
// machine spinning made a decode step about 30% slower (perf/README.md). So after such a
// sign no team spins for kSpinBackoff; kernels use the arena's sleeping workers meanwhile.
std::atomic<int64_t> contended_at_ns{std::numeric_limits<int64_t>::min() / 2};
constexpr auto kSpinBackoff = std::chrono::milliseconds(200);
// A spin loop that did not run for this long was switched out (by the OS or the hypervisor).
constexpr auto kSpinStall = std::chrono::microseconds(50);

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void NoteContended() { contended_at_ns.store(NowNs(), std::memory_order_relaxed); }

std::atomic<SpinContention> contention_mode{SpinContention::kDetect};

bool ContendedRecently() {
  const SpinContention mode = contention_mode.load(std::memory_order_relaxed);
  if (mode != SpinContention::kDetect) return mode == SpinContention::kForceContended;
  return NowNs() - contended_at_ns.load(std::memory_order_relaxed) <
         std::chrono::duration_cast<std::chrono::nanoseconds>(kSpinBackoff).count();
}

// Times this thread was switched out while it could still run (another thread took its core).
long InvoluntarySwitches() {
#if defined(__linux__)
  rusage usage{};
  if (getrusage(RUSAGE_THREAD, &usage) == 0) return usage.ru_nivcsw;
#endif
  return 0;
}

}  // namespace

// One team call at a time: its pieces are claimed through `ticket` (call number in the high
// 32 bits, next piece in the low 32). The ticket is also a sequence lock over the call's
// parameters: the owner closes it (next call number, piece kClosed) before it rewrites them
// and opens it after, and a helper's claim (a compare-exchange of the ticket it read before
// the parameters) succeeds only if the ticket did not move in between. So a helper late from
// an earlier call, or one that read parameters the owner was rewriting, claims nothing.
constexpr uint64_t kClosed = 0xffffffffu;

struct SpinTeam {
  std::atomic<uint64_t> ticket{0};
  std::atomic<void (*)(const void*, int64_t, int64_t)> chunk{nullptr};
  std::atomic<const void*> context{nullptr};
  std::atomic<int64_t> n{0}, pieces{0};
  std::atomic<int64_t> done{0};  // pieces finished in the current call
  std::mutex error_mu;
  std::exception_ptr error;
  std::atomic<bool> stopped{false};
  std::atomic<int> helpers{0};  // queued or spinning
  int wanted = 0;               // the arena's threads besides the caller
  Clock::duration idle_spin{};
  // The helpers, spawned from the owner's thread: the scope's end waits for them, and one
  // no thread has taken yet runs there and leaves at once (nothing outlives the scope).
  tbb::task_group helpers_group;

  // Runs pieces of the current call (number `call`) until none is left to claim.
  void Work(uint64_t call) {
    for (;;) {
      uint64_t t = ticket.load(std::memory_order_acquire);
      if ((t >> 32) != call) return;
      if ((t & kClosed) == kClosed) {  // the owner is writing this call's parameters
        CpuRelax();
        continue;
      }
      const auto f = chunk.load(std::memory_order_relaxed);
      const void* c = context.load(std::memory_order_relaxed);
      const int64_t total = n.load(std::memory_order_relaxed);
      const int64_t count = pieces.load(std::memory_order_relaxed);
      const auto piece = static_cast<int64_t>(t & kClosed);
      if (piece >= count) return;
      // Orders the parameter loads before the claim (the reader side of the sequence lock).
      std::atomic_thread_fence(std::memory_order_acquire);
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      RunPiece(f, c, total * piece / count, total * (piece + 1) / count);
    }
  }

  void RunPiece(void (*f)(const void*, int64_t, int64_t), const void* c, int64_t b, int64_t e) {
    try {
      f(c, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
    done.fetch_add(1, std::memory_order_acq_rel);
  }
};

namespace {

thread_local SpinTeam* active_team = nullptr;  // set on the thread that owns the team
thread_local bool in_team_call = false;        // running a piece of a team call

// A helper: spins for calls, works their pieces, and leaves after idle_spin without one, or
// at once when its core turns out to be wanted elsewhere (then no team spins for a while).
void Help(SpinTeam* team) {
  in_team_call = true;
  uint64_t last = ~uint64_t{0};  // joins a call already under way
  const long switches = InvoluntarySwitches();
  Clock::time_point idle_from = Clock::now(), checked = idle_from;
  for (unsigned spins = 0; !team->stopped.load(std::memory_order_acquire); ++spins) {
    const uint64_t call = team->ticket.load(std::memory_order_acquire) >> 32;
    if (call != last) {
      last = call;
      team->Work(call);
      if (InvoluntarySwitches() != switches) {
        NoteContended();
        break;
      }
      idle_from = checked = Clock::now();
      continue;
    }
    CpuRelax();
    if (spins % 64 != 0) continue;
    const Clock::time_point now = Clock::now();
    if (now - checked > kSpinStall) {
      NoteContended();
      break;
    }
    checked = now;
    if (now - idle_from > team->idle_spin) break;
  }
  in_team_call = false;
  team->helpers.fetch_sub(1, std::memory_order_acq_rel);
}

// Spawns helpers until `wanted` are queued or spinning (on the owner's thread only).
void Recruit(SpinTeam* team) {
  while (team->helpers.load(std::memory_order_acquire) < team->wanted) {
    team->helpers.fetch_add(1, std::memory_order_acq_rel);
    team->helpers_group.run([team] { Help(team); });
  }
}

void RunOnTeam(SpinTeam& team, int64_t n, int64_t grain,
               void (*chunk)(const void*, int64_t, int64_t), const void* context) {
  const int64_t threads = team.wanted + 1;
  // Close the ticket before rewriting the parameters: a helper still reading the previous
  // call's can no longer claim with them (see SpinTeam).
  const uint64_t call = (team.ticket.load(std::memory_order_relaxed) >> 32) + 1;
  team.ticket.store((call << 32) | kClosed, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  team.chunk.store(chunk, std::memory_order_relaxed);
  team.context.store(context, std::memory_order_relaxed);
  team.n.store(n, std::memory_order_relaxed);
  team.pieces.store(std::min((n + grain - 1) / grain, 4 * threads), std::memory_order_relaxed);
  team.done.store(0, std::memory_order_relaxed);
  team.error = nullptr;
  team.ticket.store(call << 32, std::memory_order_release);
  in_team_call = true;
  team.Work(call);
  in_team_call = false;
  const int64_t pieces = team.pieces.load(std::memory_order_relaxed);
  while (team.done.load(std::memory_order_acquire) < pieces) CpuRelax();
  if (team.error) std::rethrow_exception(team.error);
}

}  // namespace

SpinTeamScope::SpinTeamScope(std::chrono::microseconds idle_spin) : outer_(active_team) {
  const int64_t threads = IntraOpThreads();
  // Inside a team (a nested run, or a piece of a call) the outer team serves.
  if (idle_spin.count() <= 0 || threads < 2 || in_team_call || active_team != nullptr ||
      ContendedRecently())
    return;
  team_ = std::make_unique<SpinTeam>();
  team_->wanted = static_cast<int>(threads - 1);
  team_->idle_spin = idle_spin;
  Recruit(team_.get());
  active_team = team_.get();
}

SpinTeamScope::~SpinTeamScope() {
  if (!team_) return;
  team_->stopped.store(true, std::memory_order_release);
  active_team = outer_;
  team_->helpers_group.wait();
}

bool SpinTeamScope::spinning() const { return team_ != nullptr; }

void SetSpinContentionForTesting(SpinContention mode) {
  contention_mode.store(mode, std::memory_order_relaxed);
}

bool SpinContendedRecently() { return ContendedRecently(); }

int64_t IntraOpThreads() { return std::max<int64_t>(1, tbb::this_task_arena::max_concurrency()); }

void RunIsolated(void (*fn)(const void*), const void* context) {
  tbb::this_task_arena::isolate([&] { fn(context); });
}

void ParallelChunks(int64_t n, int64_t grain, void (*chunk)(const void*, int64_t, int64_t),
                    const void* context) {
  if (in_team_call) return chunk(context, 0, n);  // the team is busy with the outer call
  if (active_team != nullptr) {
    const int helpers = active_team->helpers.load(std::memory_order_acquire);
    const bool backing_off = helpers < active_team->wanted && ContendedRecently();
    if (helpers < active_team->wanted && !backing_off) Recruit(active_team);
    // Backing off with no helper left: the arena's workers, woken as without a team.
    if (!backing_off || helpers > 0) return RunOnTeam(*active_team, n, grain, chunk, context);
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, grain),
      [&](const tbb::blocked_range<int64_t>& r) { chunk(context, r.begin(), r.end()); });
}

}  // namespace onnx_light::core::runtime
