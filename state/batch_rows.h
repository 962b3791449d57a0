// One model call for several requests (continuous batching, issue 15): each request is one
// batch row and keeps its own paged caches. The model's persistent bindings past <- present
// are declared as sequences of paged caches, one per batch row (ai.rt::PagedAttention reads
// row r's cache for batch row r, each row from its own length).
#pragma once

#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"

namespace onnx_light::core::runtime {

// Runs `session` once. `feeds` hold the per-row inputs of the batch (row r is request r,
// e.g. input_ids [rows.size(), L]); each bound input is fed the sequence of the rows' caches
// (rows[r]->at(input name)), and on return each row's cache is its row of the bound output.
// Assembling and splitting move cache handles: no page payload is copied. Returns the other
// graph outputs. On failure the rows keep their caches. Throws kInvalidArgument when a row
// lacks a bound cache or a bound output is not one cache per row. With `last_position`
// (generate's logits) only those outputs come back, computed at the last position only
// (RunOptions::last_position_outputs).
RuntimeValueMap RunRows(const RuntimeSession& session, RuntimeContext& context,
                        RuntimeValueMap feeds, const std::vector<RuntimeValueMap*>& rows,
                        const std::vector<std::string>* last_position = nullptr);

}  // namespace onnx_light::core::runtime
