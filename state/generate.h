// Autoregressive generation (spec "Autoregressive generation").
//
// Models with persistent_bindings run through a PersistentValueState: the prompt is
// evaluated once, then each step feeds one new token; the caches stay in the state (bound
// inputs' initial values come from the feeds, or from paged_cache_initializer defaults).
// Models without bindings run through a RuntimeSession on the full growing prefix; no cache
// is guessed from names. Each call owns fresh state; the model and the caller's feeds are
// never modified.
//
// Sessions: the model forms compile the model once per model object (SessionCache::Default(),
// keyed by the model object and the session options), so repeated calls and many requests
// share one plan, one set of kernels and one copy of packed weights; each call builds only
// its own PersistentValueState on that session. The session forms take the session directly.
// The loop asks the state for the logits only: the caches stay in the state and are never
// handed out, so a bound cache is appended in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "executor/task.h"
#include "state/sampling.h"

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core::runtime {

class TaskCompletion;

// One model call made for the generation by someone else (a batching scheduler: several
// requests' rows in one call, state/batch_rows.h): `feeds` are this generation's inputs of
// the call (its rows only), `rows` its rows' caches ({bound input: paged cache} per batch
// row), which the runner updates. Returns the call's outputs (at least the logits, of this
// generation's rows only, at the last position).
using StepRunner =
    std::function<Task<RuntimeValueMap>(RuntimeValueMap feeds, std::vector<RuntimeValueMap>* rows)>;

struct GenerationOptions {
  int64_t max_new_tokens = 32;
  float temperature = 0.0f;  // 0: greedy
  std::optional<uint64_t> seed;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;  // defaults to eos_token_id (or 0 without EOS)
  int64_t top_k = 0;
  float top_p = 1.0f;
  float repetition_penalty = 1.0f;
  std::vector<int64_t> stop_token_ids;  // like EOS: a row that emits one is finished
  // Chunked prefill (models with bound caches): the prompt is fed in calls of at most this
  // many tokens (the last chunk's call gives the first token), so that a scheduler can run
  // other requests' steps between the chunks. 0: the whole prompt in one call.
  int64_t prefill_chunk = 0;
  std::string input_ids_name = "input_ids";
  std::string logits_name = "logits";
  std::string attention_mask_name = "attention_mask";
  std::string position_ids_name = "position_ids";
  // Awaited before every model call after the first when set: a scheduler suspends the
  // generation here and resumes it later (possibly on another thread) to interleave requests.
  std::function<Task<void>(int64_t step)> step_gate;
  // When set, every model call is step_runner's (step_gate is not used) and the caches are
  // kept as row caches: each bound input's initial value must be a sequence of one paged
  // cache per batch row (ai.rt::PagedAttention's row caches). A generation cancelled while
  // its call runs drops that call's token.
  StepRunner step_runner;
};

// Called after every step with the step index and the tokens just chosen (one per row,
// pad for finished rows). Return false to stop early: the result then holds the tokens
// published so far.
using TokenCallback = std::function<bool(int64_t step, const std::vector<int64_t>& tokens)>;

struct GenerationStats {
  int64_t steps = 0;
  std::vector<int64_t> step_ns;  // wall time of each model call
  bool used_persistent_state = false;
};

// The generation loop as a coroutine: each model call is one co_await. `cancel` (optional)
// is checked between tokens: when cancelled the loop stops and returns the tokens so far.
Task<Tensor> GenerateTask(std::shared_ptr<const RuntimeSession> session, RuntimeContext& context,
                          RuntimeValueMap feeds, GenerationOptions options,
                          TokenCallback on_token = nullptr, const TaskCompletion* cancel = nullptr,
                          GenerationStats* stats = nullptr);
// The same on the cached session of `model` (SessionCache::Default()).
Task<Tensor> GenerateTask(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                          RuntimeValueMap feeds, GenerationOptions options,
                          RuntimeSessionOptions session_options = {},
                          TokenCallback on_token = nullptr, const TaskCompletion* cancel = nullptr,
                          GenerationStats* stats = nullptr);

// Returns an INT64 [batch, prompt_length + generated_length] tensor including the prompt.
Tensor Generate(std::shared_ptr<const RuntimeSession> session, RuntimeContext& context,
                RuntimeValueMap feeds, const GenerationOptions& options,
                TokenCallback on_token = nullptr, const TaskCompletion* cancel = nullptr,
                GenerationStats* stats = nullptr);
// On the cached session of `model` (SessionCache::Default()).
Tensor Generate(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                RuntimeValueMap feeds, const GenerationOptions& options,
                RuntimeSessionOptions session_options = {}, TokenCallback on_token = nullptr,
                const TaskCompletion* cancel = nullptr, GenerationStats* stats = nullptr);
// The model must outlive the call. Its lifetime cannot be followed, so the call compiles the
// model into a private session (not cached).
Tensor Generate(const ModelProto& model, RuntimeContext& context, RuntimeValueMap feeds,
                const GenerationOptions& options, RuntimeSessionOptions session_options = {});

}  // namespace onnx_light::core::runtime
