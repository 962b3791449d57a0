// Splits [0, n) into chunks run by tbb::parallel_for when n is large enough to pay for the
// tasks. It runs in the caller's task arena, i.e. the session's arena inside a run.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstdint>

namespace onnx_light::ops::elementwise {

// Elements below which a loop stays on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain) {
    f(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

}  // namespace onnx_light::ops::elementwise
