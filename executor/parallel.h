// The one intra-op parallel API. A kernel runs inside its session's task arena
// (RuntimeSession::Execute enters it), so the arena bounds both the thread count and where
// the chunks run; nothing here creates threads or arenas. Kernels reach it through their
// call (KernelCall::threads(), KernelCall::ParallelFor); helpers in ops/math that have no
// call use the same free functions. No TBB header leaks from here (executor/parallel.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

namespace onnx_light::core::runtime {

struct SpinTeam;

// Threads the running kernel may use: the concurrency of the arena it runs in (the
// session's intra-op thread count), at least 1.
int64_t IntraOpThreads();

// Runs chunk(context, begin, end) over [0, n) split into chunks of at least `grain`
// (n > grain >= 1) across the arena's threads. Use ParallelFor.
void ParallelChunks(int64_t n, int64_t grain, void (*chunk)(const void*, int64_t, int64_t),
                    const void* context);

// While alive on the thread that runs a plan inline (inside the session's arena), the
// arena's other threads join that thread's ParallelFor calls as a team that spins between
// them, instead of going to sleep after each product and being woken for the next: on a VM
// waking an idle worker costs tens to hundreds of microseconds (perf/bench_matmul
// BM_GemvAfterGap), a decode step runs ~120 products with serial nodes between them.
// A helper that waits longer than `idle_spin` for the next call goes back to the arena
// (it comes back at the next call); all of them go when the scope ends. ParallelFor calls
// made inside a team call run on their own thread. No-op with one thread, idle_spin 0, or
// inside another team's scope (the outer team serves).
// Spinning pays only on cores nothing else wants: a helper that finds itself switched out
// (an involuntary context switch, or its spin loop stalled by the OS or hypervisor) leaves,
// and for the next 200 ms no scope spins and no helper is recruited (process-wide).
class SpinTeamScope {
 public:
  explicit SpinTeamScope(std::chrono::microseconds idle_spin);
  ~SpinTeamScope();
  // Whether this scope runs a team (false when it is a no-op, see above).
  bool spinning() const;
  SpinTeamScope(const SpinTeamScope&) = delete;
  SpinTeamScope& operator=(const SpinTeamScope&) = delete;

 private:
  std::unique_ptr<SpinTeam> team_;
  SpinTeam* outer_ = nullptr;
};

// Whether a spinning helper found its core wanted elsewhere in the last 200 ms (then scopes
// do not spin). Tests fix the answer (kForceContended, kIgnore: a loaded machine must not
// change what they check) and restore kDetect.
bool SpinContendedRecently();
enum class SpinContention { kDetect, kForceContended, kIgnore };
void SetSpinContentionForTesting(SpinContention mode);

// Runs fn(context) so that while it waits for its own ParallelFor chunks the thread runs
// only those, never another task of the arena (the flow-graph executor's node tasks of a
// concurrent run). Use CallOnceIsolated.
void RunIsolated(void (*fn)(const void*), const void* context);

// std::call_once(flag, fn) for a build that may use ParallelFor (a kernel's packed copy of
// a constant weight, built on a call): without isolation the building thread, waiting for
// its chunks, could pick up the same kernel's node task of a concurrent run, reach this
// call_once again on the same thread and deadlock.
template <typename F>
void CallOnceIsolated(std::once_flag& flag, const F& fn) {
  std::call_once(flag,
                 [&] { RunIsolated([](const void* f) { (*static_cast<const F*>(f))(); }, &fn); });
}

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` (clamped to 1), on the
// calling thread when n <= grain, else split across the arena's threads.
template <typename F>
void ParallelFor(int64_t n, int64_t grain, const F& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  ParallelChunks(
      n, grain,
      [](const void* f, int64_t begin, int64_t end) { (*static_cast<const F*>(f))(begin, end); },
      &fn);
}

}  // namespace onnx_light::core::runtime
