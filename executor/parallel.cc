#include "executor/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>

namespace onnx_light::core::runtime {

int64_t IntraOpThreads() { return std::max<int64_t>(1, tbb::this_task_arena::max_concurrency()); }

void ParallelChunks(int64_t n, int64_t grain, void (*chunk)(const void*, int64_t, int64_t),
                    const void* context) {
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, grain),
      [&](const tbb::blocked_range<int64_t>& r) { chunk(context, r.begin(), r.end()); });
}

}  // namespace onnx_light::core::runtime
