// The grain below which elementwise loops stay on the calling thread; the loop itself is the
// runtime's one intra-op ParallelFor (executor/parallel.h).
#pragma once

#include <cstdint>

#include "executor/parallel.h"

namespace onnx_light::ops::elementwise {

// Elements below which a loop stays on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

// The intra-op parallel loop (executor/parallel.h; the one implementation).
using core::runtime::ParallelFor;

}  // namespace onnx_light::ops::elementwise
