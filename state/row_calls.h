// The batched scheduler's step (issue 15): the model calls of several generations, each
// with its own rows and row caches, made in as few RunRows calls as their feeds allow.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"

namespace onnx_light::core::runtime {

// One generation's model call (GenerationOptions::step_runner's arguments).
struct RowCall {
  const RuntimeSession* session = nullptr;
  RuntimeValueMap feeds;                             // dim 0 of each: this call's rows
  std::vector<RuntimeValueMap>* rows = nullptr;      // the rows' caches, updated
  const std::vector<std::string>* logits = nullptr;  // outputs read at the last position
  RuntimeValueMap outputs;                           // on success: this call's rows only
  std::exception_ptr error;                          // on failure
};

// Runs every call. Calls on one session whose feeds have the same names, dtypes and shapes
// past dim 0 (and the same outputs asked for) share one RunRows call: their feeds are
// concatenated along dim 0 and each gets its rows of the outputs back. When a shared call
// fails, each of its calls runs alone, so an error stays with the calls that cause it (a
// failed call leaves the rows' caches as they were). Returns the rows of each model call.
std::vector<int64_t> RunRowCalls(RuntimeContext& context, const std::vector<RowCall*>& calls);

}  // namespace onnx_light::core::runtime
