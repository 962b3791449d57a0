#include "executor/async_run.h"

#include <tbb/global_control.h>
#include <tbb/info.h>

namespace onnx_light::core::runtime {

tbb::task_arena& AsyncRunArena() {
  // A run this arena carries executes on one of TBB's workers, which then enters its
  // session's arena: TBB starts one worker per core but one (the calling thread is meant to
  // be the last), so on 2 cores the worker carrying the run was the only one, and the run's
  // parallel kernels found no thread to help them (RequestScheduler's batched steps ran on
  // one core while the caller waited: 45 ms a step against 31 ms from the calling thread,
  // issue 15). One more worker than that: the caller's share, since it only waits.
  // Both live for the process, held by one object that stays reachable (LeakSanitizer saw the
  // control as leaked when an otherwise unused static pointer to it was optimised away).
  struct Held {
    tbb::global_control* workers;
    tbb::task_arena* arena;
  };
  static Held* const held =
      new Held{new tbb::global_control(tbb::global_control::max_allowed_parallelism,
                                       static_cast<size_t>(tbb::info::default_concurrency()) + 1),
               new tbb::task_arena()};
  return *held->arena;
}

}  // namespace onnx_light::core::runtime
