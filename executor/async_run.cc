#include "executor/async_run.h"

namespace onnx_light::core::runtime {

tbb::task_arena& AsyncRunArena() {
  static tbb::task_arena* arena = new tbb::task_arena();  // lives for the process
  return *arena;
}

}  // namespace onnx_light::core::runtime
