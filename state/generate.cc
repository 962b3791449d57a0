#include "state/generate.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <unordered_set>

#include "core/error.h"
#include "executor/session_cache.h"
#include "onnx_light.pb.h"
#include "state/persistent_value_state.h"
#include "state/task_completion.h"

namespace onnx_light::core::runtime {

namespace {

bool Declares(const GraphProto& graph, const std::string& name) {
  for (const auto& input : graph.input())
    if (input.name() == name) return true;
  return false;
}

// Row `b`'s logits for the last position, as floats: FLOAT logits read in place, others
// widened into `buffer` (reused across rows and steps: no allocation per token).
std::span<const float> LastLogits(const Tensor& logits, int64_t b, const std::string& name,
                                  std::vector<float>& buffer) {
  OL_CHECK(logits.rank() == 2 || logits.rank() == 3, ErrorCode::kInvalidArgument,
           "logits output '" + name +
               "' must be [batch, sequence, vocabulary] or "
               "[batch, vocabulary], got " +
               ShapeToString(logits.shape()));
  const int64_t vocab = logits.dim(-1);
  const int64_t seq = logits.rank() == 3 ? logits.dim(1) : 1;
  OL_CHECK(seq > 0 && vocab > 0, ErrorCode::kInvalidArgument,
           "logits output '" + name + "' is empty: " + ShapeToString(logits.shape()));
  const int64_t start = (b * seq + seq - 1) * vocab;
  if (logits.dtype() == DataType::kFloat)
    return {logits.data<float>() + start, static_cast<size_t>(vocab)};
  buffer.resize(static_cast<size_t>(vocab));
  // One loop per type (not a switch per element): this runs on every row of every step.
  const auto widen = [&](auto convert) {
    for (int64_t v = 0; v < vocab; ++v) buffer[static_cast<size_t>(v)] = convert(start + v);
  };
  switch (logits.dtype()) {
    case DataType::kDouble:
      widen([&](int64_t i) { return static_cast<float>(logits.data<double>()[i]); });
      break;
    case DataType::kFloat16:
      widen([&](int64_t i) { return HalfToFloat(logits.data<uint16_t>()[i]); });
      break;
    case DataType::kBFloat16:
      widen([&](int64_t i) { return BFloat16ToFloat(logits.data<uint16_t>()[i]); });
      break;
    default:
      Throw(ErrorCode::kInvalidArgument, "logits output '" + name +
                                             "' must be FLOAT, DOUBLE, FLOAT16 or BFLOAT16, got " +
                                             DataTypeName(logits.dtype()));
  }
  return buffer;
}

Tensor Int64Tensor(const std::string& name, int64_t rows, int64_t cols,
                   const std::function<int64_t(int64_t, int64_t)>& at) {
  std::vector<int64_t> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = at(r, c);
  return Tensor::FromInt64(name, {rows, cols}, std::move(v));
}

bool DeclaresOutput(const GraphProto& graph, const std::string& name) {
  for (const auto& output : graph.output())
    if (output.name() == name) return true;
  return false;
}

// One model call, returning the logits only, at the last position only (the loop reads no
// other; an LM head then multiplies one row per batch on the prompt step). A coroutine so
// that the loop reads as one co_await per token; the run itself is synchronous here
// (AsyncRun offers the asio form).
Task<RuntimeValueMap> RunStep(PersistentValueState* state, const RuntimeSession& session,
                              RuntimeContext& context, RuntimeValueMap feeds,
                              const std::vector<std::string>& wanted) {
  if (state != nullptr) co_return state->Run(context, std::move(feeds), wanted, true);
  RunOptions options;
  options.last_position_outputs = &wanted;
  co_return session.Run(context, std::move(feeds), wanted, options);
}

// The input roles name distinct inputs, none of them a persistent one: a name in two roles
// (attention_mask_name="position_ids") would feed one input twice per step, with a length
// that grows with every token.
void CheckRoles(const GenerationOptions& o, const GraphProto& graph) {
  const std::pair<const char*, const std::string*> roles[] = {
      {"input_ids_name", &o.input_ids_name},
      {"attention_mask_name", &o.attention_mask_name},
      {"position_ids_name", &o.position_ids_name}};
  for (size_t i = 0; i < std::size(roles); ++i) {
    for (size_t j = i + 1; j < std::size(roles); ++j)
      OL_CHECK(*roles[i].second != *roles[j].second, ErrorCode::kInvalidArgument,
               std::string("generate: ") + roles[i].first + " and " + roles[j].first +
                   " both name '" + *roles[i].second + "'; each role needs its own input");
    for (const auto& b : graph.persistent_bindings())
      OL_CHECK(b.input_name() != *roles[i].second, ErrorCode::kInvalidArgument,
               std::string("generate: ") + roles[i].first + " '" + *roles[i].second +
                   "' is a persistent input (bound to '" + b.output_name() + "')");
  }
}

// How many positions the model embeds, when the graph shows it: a Gather (axis 0) of an
// initializer table by the position input (a learned position embedding), else the rows of
// an initializer rotary table (cos_cache) of a com.microsoft GroupQueryAttention or
// RotaryEmbedding node (the onnxruntime-genai builds). 0 when unknown (torch's RoPE exports
// compute their tables from the positions: no limit in the graph).
struct PositionLimit {
  int64_t positions = 0;
  std::string source;  // what sets the limit, for the message
};

const TensorProto* FindInitializer(const GraphProto& graph, const std::string& name) {
  for (const auto& init : graph.initializer())
    if (init.name() == name && init.dims_size() >= 1 && init.dims(0) > 0) return &init;
  return nullptr;
}

PositionLimit FindPositionLimit(const GraphProto& graph, const std::string& position_name,
                                bool declares_positions) {
  for (const auto& node : graph.node()) {
    if (!declares_positions || node.op_type() != "Gather" || node.input_size() < 2 ||
        node.input(1) != position_name)
      continue;
    int64_t axis = 0;
    for (const auto& a : node.attribute())
      if (a.name() == "axis") axis = a.i();
    if (axis != 0) continue;
    if (const TensorProto* table = FindInitializer(graph, node.input(0)))
      return {table->dims(0), "'" + position_name + "' indexes the " +
                                  std::to_string(table->dims(0)) + " rows of '" + table->name() +
                                  "'"};
  }
  for (const auto& node : graph.node()) {
    if (node.domain() != "com.microsoft") continue;
    const int cos = node.op_type() == "GroupQueryAttention" ? 7
                    : node.op_type() == "RotaryEmbedding"   ? 2
                                                            : -1;
    if (cos < 0 || node.input_size() <= cos) continue;
    if (const TensorProto* table = FindInitializer(graph, node.input(cos)))
      return {table->dims(0), "the rotary table '" + table->name() + "' of " + node.op_type() +
                                  " node '" + node.name() + "' has " +
                                  std::to_string(table->dims(0)) + " rows"};
  }
  return {};
}

// Refuses a position at or past the limit.
void CheckPosition(const PositionLimit& limit, int64_t position) {
  OL_CHECK(limit.positions == 0 || position < limit.positions, ErrorCode::kInvalidArgument,
           "generate: position " + std::to_string(position) + " is past the model's limit of " +
               std::to_string(limit.positions) + " positions (" + limit.source +
               "); use a shorter prompt or fewer max_new_tokens");
}

SamplingOptions SamplingFrom(const GenerationOptions& o) {
  SamplingOptions sampling;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  sampling.top_p = o.top_p;
  sampling.repetition_penalty = o.repetition_penalty;
  sampling.seed = o.seed;
  return sampling;
}

using Rows = std::vector<std::vector<int64_t>>;

// What the loop knows of each batch row: its tokens (the prompt, then the chosen ones), its
// attention mask and positions (one entry per token), and whether it stopped.
struct TokenRows {
  int64_t batch = 0, prompt_len = 0;
  Rows tokens, mask, positions;
  std::vector<bool> finished;

  // `name`: the [batch, cols] slice [from, from + cols) of `rows`.
  Tensor Slice(const std::string& name, const Rows& rows, int64_t from, int64_t cols) const {
    return Int64Tensor(name, batch, cols, [&](int64_t b, int64_t t) {
      return rows[static_cast<size_t>(b)][static_cast<size_t>(from + t)];
    });
  }
};

// The prompt tensor, taken out of the feeds.
Tensor TakePrompt(RuntimeValueMap& feeds, const GenerationOptions& o) {
  auto it = feeds.find(o.input_ids_name);
  OL_CHECK(it != feeds.end(), ErrorCode::kInvalidArgument,
           "generate: feeds must contain the token input '" + o.input_ids_name + "'");
  const RuntimeValue& ids = it->second;
  OL_CHECK(ids.is_tensor() && ids.tensor().dtype() == DataType::kInt64 &&
               ids.tensor().rank() == 2 && ids.tensor().dim(0) > 0 && ids.tensor().dim(1) > 0,
           ErrorCode::kInvalidArgument,
           "generate: '" + o.input_ids_name +
               "' must be a non-empty INT64 [batch, prompt] tensor, got " +
               (ids.is_tensor()
                    ? DataTypeName(ids.tensor().dtype()) + " " + ShapeToString(ids.tensor().shape())
                    : std::string("a value that is not a tensor")));
  Tensor prompt = it->second.tensor();
  feeds.erase(it);
  return prompt;
}

// The attention mask: supplied (left padding allowed; taken out of the feeds) or all ones.
Rows TakeMask(RuntimeValueMap& feeds, const std::string& name, int64_t batch, int64_t prompt_len) {
  Rows mask(static_cast<size_t>(batch), std::vector<int64_t>(static_cast<size_t>(prompt_len), 1));
  auto it = feeds.find(name);
  if (it == feeds.end()) return mask;
  const Tensor& m = it->second.tensor();
  OL_CHECK(m.dtype() == DataType::kInt64 && m.shape() == Shape({batch, prompt_len}),
           ErrorCode::kInvalidArgument,
           "generate: '" + name + "' must be INT64 [" + std::to_string(batch) + ", " +
               std::to_string(prompt_len) + "]");
  for (int64_t b = 0; b < batch; ++b) {
    bool seen_one = false;
    for (int64_t t = 0; t < prompt_len; ++t) {
      const int64_t v = m.data<int64_t>()[b * prompt_len + t];
      OL_CHECK(v == 0 || v == 1, ErrorCode::kInvalidArgument,
               "generate: attention mask values must be 0 or 1");
      OL_CHECK(!(seen_one && v == 0), ErrorCode::kInvalidArgument,
               "generate: prompts must be unpadded or left-padded (row " + std::to_string(b) +
                   " of '" + name + "' has padding after a token)");
      seen_one = seen_one || v == 1;
      mask[static_cast<size_t>(b)][static_cast<size_t>(t)] = v;
    }
    OL_CHECK(seen_one, ErrorCode::kInvalidArgument,
             "generate: row " + std::to_string(b) + " of the prompt is all padding");
  }
  feeds.erase(it);
  return mask;
}

// Positions: supplied for the prompt (taken out of the feeds), or counted over the mask
// (padding gets 1, as transformers does); each new token continues from the row's last one.
Rows TakePositions(RuntimeValueMap& feeds, const std::string& name, const Rows& mask, int64_t batch,
                   int64_t prompt_len) {
  Rows positions(static_cast<size_t>(batch));
  if (auto it = feeds.find(name); it != feeds.end()) {
    const Tensor& p = it->second.tensor();
    OL_CHECK(p.dtype() == DataType::kInt64 && p.shape() == Shape({batch, prompt_len}),
             ErrorCode::kInvalidArgument, "generate: '" + name + "' must be INT64 [batch, prompt]");
    for (int64_t b = 0; b < batch; ++b)
      positions[static_cast<size_t>(b)].assign(p.data<int64_t>() + b * prompt_len,
                                               p.data<int64_t>() + (b + 1) * prompt_len);
    feeds.erase(it);
    return positions;
  }
  for (int64_t b = 0; b < batch; ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < prompt_len; ++t) {
      const int64_t m = mask[static_cast<size_t>(b)][static_cast<size_t>(t)];
      count += m;
      positions[static_cast<size_t>(b)].push_back(m ? count - 1 : 1);
    }
  }
  return positions;
}

// The prompt, its mask and its positions, all taken out of the feeds.
TokenRows TakePromptRows(RuntimeValueMap& feeds, const GenerationOptions& o) {
  const Tensor prompt = TakePrompt(feeds, o);
  TokenRows rows;
  rows.batch = prompt.dim(0);
  rows.prompt_len = prompt.dim(1);
  rows.mask = TakeMask(feeds, o.attention_mask_name, rows.batch, rows.prompt_len);
  rows.positions =
      TakePositions(feeds, o.position_ids_name, rows.mask, rows.batch, rows.prompt_len);
  rows.tokens.resize(static_cast<size_t>(rows.batch));
  for (int64_t b = 0; b < rows.batch; ++b)
    rows.tokens[static_cast<size_t>(b)].assign(prompt.data<int64_t>() + b * rows.prompt_len,
                                               prompt.data<int64_t>() + (b + 1) * rows.prompt_len);
  rows.finished.assign(static_cast<size_t>(rows.batch), false);
  return rows;
}

// Bound inputs become the state's initial values (taken out of the feeds; each must be an
// empty prefix); everything else stays fixed.
RuntimeValueMap TakeInitialCaches(RuntimeValueMap& feeds, const GraphProto& graph) {
  std::unordered_set<std::string> bound;
  for (const auto& b : graph.persistent_bindings()) bound.insert(b.input_name());
  RuntimeValueMap initial;
  for (auto it = feeds.begin(); it != feeds.end();) {
    if (!bound.count(it->first)) {
      ++it;
      continue;
    }
    const RuntimeValue& v = it->second;
    // A sequence of structs: one paged cache per batch row (state/batch_rows.h).
    bool row_caches = v.is_sequence();
    for (size_t r = 0; row_caches && r < v.elements().size(); ++r)
      row_caches = v.elements()[r].is_struct();
    const bool empty = (v.is_tensor() && v.tensor().numel() == 0) || row_caches || v.is_struct();
    OL_CHECK(
        empty, ErrorCode::kInvalidArgument,
        "generate: initial cache '" + it->first +
            "' must represent an empty prefix (a zero-length dimension), got " +
            (v.is_tensor() ? ShapeToString(v.tensor().shape()) : std::string("a non-empty value")));
    initial.emplace(it->first, it->second);
    it = feeds.erase(it);
  }
  return initial;
}

// The initial caches as row caches for a step runner: rows[r][input] = row r of the
// sequence fed to each bound input (one paged cache per row).
std::vector<RuntimeValueMap> SplitRowCaches(RuntimeValueMap initial, const GraphProto& graph,
                                            int64_t batch) {
  std::vector<RuntimeValueMap> rows(static_cast<size_t>(batch));
  for (const auto& b : graph.persistent_bindings()) {
    auto it = initial.find(b.input_name());
    const bool ok = it != initial.end() && it->second.is_sequence() &&
                    static_cast<int64_t>(it->second.elements().size()) == batch;
    OL_CHECK(ok, ErrorCode::kInvalidArgument,
             "generate (batched rows): the feeds must hold the initial cache '" + b.input_name() +
                 "' as a sequence of " + std::to_string(batch) +
                 " paged caches (one per prompt row)");
    for (int64_t r = 0; r < batch; ++r)
      rows[static_cast<size_t>(r)][b.input_name()] = it->second.elements()[static_cast<size_t>(r)];
  }
  return rows;
}

// Which per-step inputs the graph declares, and the position limit they are checked against.
struct StepInputs {
  const GenerationOptions& options;
  bool declares_mask, declares_positions;
  PositionLimit limit;
};

// One call's feeds: the fixed ones, the last `fed` of the `length` known tokens, the mask
// over all of them and the positions of the fed ones.
RuntimeValueMap StepFeeds(const RuntimeValueMap& fixed, const TokenRows& rows, const StepInputs& in,
                          int64_t length, int64_t fed) {
  const GenerationOptions& o = in.options;
  RuntimeValueMap call = fixed;  // shares owners; no payload copy
  call.emplace(o.input_ids_name,
               RuntimeValue(rows.Slice(o.input_ids_name, rows.tokens, length - fed, fed)));
  if (in.declares_mask)
    call.emplace(o.attention_mask_name,
                 RuntimeValue(rows.Slice(o.attention_mask_name, rows.mask, 0, length)));
  // Refused here rather than as an index error deep inside the graph. Without a position
  // input the positions are the token indices.
  if (!in.declares_positions) {
    CheckPosition(in.limit, length - 1);
    return call;
  }
  for (const auto& row : rows.positions)
    for (int64_t t = length - fed; t < length; ++t)
      CheckPosition(in.limit, row[static_cast<size_t>(t)]);
  call.emplace(o.position_ids_name,
               RuntimeValue(rows.Slice(o.position_ids_name, rows.positions, length - fed, fed)));
  return call;
}

const Tensor& StepLogits(const RuntimeValueMap& outputs, const std::string& name, int64_t batch) {
  auto it = outputs.find(name);
  OL_CHECK(it != outputs.end() && it->second.is_tensor(), ErrorCode::kInvalidArgument,
           "generate: the model has no tensor output '" + name + "'");
  const Tensor& logits = it->second.tensor();
  OL_CHECK(
      logits.dim(0) == batch, ErrorCode::kInvalidArgument,
      "generate: logits batch " + std::to_string(logits.dim(0)) + " != " + std::to_string(batch));
  return logits;
}

bool IsStop(const GenerationOptions& o, int64_t token) {
  return (o.eos_token_id && token == *o.eos_token_id) ||
         std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), token) !=
             o.stop_token_ids.end();
}

// Samples the next token of every unfinished row (a finished one gets `pad`) and appends it
// to the row with its mask and position; returns the chosen tokens.
std::vector<int64_t> AppendNextTokens(TokenRows& rows, const Tensor& logits, Sampler& sampler,
                                      const GenerationOptions& o, int64_t pad) {
  std::vector<int64_t> chosen(static_cast<size_t>(rows.batch), pad);
  std::vector<float> widened;  // non-FLOAT logits only
  for (size_t b = 0; b < chosen.size(); ++b) {
    auto& row = rows.tokens[b];
    if (!rows.finished[b]) {
      const std::span<const float> l =
          LastLogits(logits, static_cast<int64_t>(b), o.logits_name, widened);
      chosen[b] = sampler.Next(l, row);
      if (IsStop(o, chosen[b])) rows.finished[b] = true;
    }
    row.push_back(chosen[b]);
    rows.mask[b].push_back(1);
    rows.positions[b].push_back(rows.positions[b].back() + 1);
  }
  return chosen;
}

void RecordStep(GenerationStats* stats, int64_t step, std::chrono::steady_clock::time_point start) {
  if (stats == nullptr) return;
  stats->steps = step + 1;
  stats->step_ns.push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

}  // namespace

Task<Tensor> GenerateTask(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                          RuntimeValueMap feeds, GenerationOptions options,
                          RuntimeSessionOptions session_options, TokenCallback on_token,
                          const TaskCompletion* cancel, GenerationStats* stats) {
  OL_CHECK(model != nullptr, ErrorCode::kInvalidArgument, "generate: model is null");
  std::shared_ptr<const RuntimeSession> session =
      SessionCache::Default().Get(model, session_options);
  model.reset();  // the session holds it
  co_return co_await GenerateTask(std::move(session), context, std::move(feeds), std::move(options),
                                  std::move(on_token), cancel, stats);
}

Task<Tensor> GenerateTask(std::shared_ptr<const RuntimeSession> session, RuntimeContext& context,
                          RuntimeValueMap feeds, GenerationOptions options, TokenCallback on_token,
                          const TaskCompletion* cancel, GenerationStats* stats) {
  OL_CHECK(session != nullptr, ErrorCode::kInvalidArgument, "generate: session is null");
  OL_CHECK(options.max_new_tokens >= 0, ErrorCode::kInvalidArgument,
           "max_new_tokens must be >= 0, got " + std::to_string(options.max_new_tokens));
  OL_CHECK(options.prefill_chunk >= 0, ErrorCode::kInvalidArgument,
           "prefill_chunk must be >= 0, got " + std::to_string(options.prefill_chunk));
  Sampler sampler(SamplingFrom(options));  // validates the sampling options
  const GraphProto& graph = session->model().graph();
  CheckRoles(options, graph);

  // The feeds split three ways: the prompt rows, the caches' initial values, the fixed rest.
  TokenRows rows = TakePromptRows(feeds, options);
  RuntimeValueMap initial = TakeInitialCaches(feeds, graph);
  const RuntimeValueMap fixed = std::move(feeds);

  // Only the logits come back from each call: the caches stay in the state.
  OL_CHECK(options.max_new_tokens == 0 || DeclaresOutput(graph, options.logits_name),
           ErrorCode::kInvalidArgument,
           "generate: the model has no tensor output '" + options.logits_name + "'");
  const std::vector<std::string> wanted = {options.logits_name};
  std::unique_ptr<PersistentValueState> state;
  std::vector<RuntimeValueMap> row_caches;  // with a step runner: the caches, per row
  const bool runner = static_cast<bool>(options.step_runner);
  if (runner)
    row_caches = SplitRowCaches(std::move(initial), graph, rows.batch);
  else if (graph.persistent_bindings_size() > 0)
    state = std::make_unique<PersistentValueState>(session, std::move(initial));
  if (stats) stats->used_persistent_state = state != nullptr || runner;

  const int64_t pad =
      options.pad_token_id ? *options.pad_token_id : options.eos_token_id.value_or(0);
  const StepInputs inputs{options, Declares(graph, options.attention_mask_name),
                          Declares(graph, options.position_ids_name),
                          FindPositionLimit(graph, options.position_ids_name,
                                            Declares(graph, options.position_ids_name))};
  const bool cached = state != nullptr || runner;
  // Chunked prefill: every chunk but the last, each its own call (the caches grow; their
  // logits are not read); the loop's first call feeds the last chunk.
  int64_t prefilled = 0;
  const int64_t chunk = cached && options.max_new_tokens > 0 ? options.prefill_chunk : 0;
  while (chunk > 0 && rows.prompt_len - prefilled > chunk) {
    if (prefilled > 0 && options.step_gate && !runner) co_await options.step_gate(0);
    if (cancel != nullptr && cancel->cancelled()) break;
    RuntimeValueMap call = StepFeeds(fixed, rows, inputs, prefilled + chunk, chunk);
    if (runner)
      co_await options.step_runner(std::move(call), &row_caches);
    else
      co_await RunStep(state.get(), *session, context, std::move(call), wanted);
    prefilled += chunk;
  }
  int64_t generated = 0;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if ((step > 0 || prefilled > 0) && options.step_gate && !runner)
      co_await options.step_gate(step);
    if (cancel != nullptr && cancel->cancelled()) break;
    // With a state, only the first call feeds the (rest of the) prompt; later ones one token.
    const int64_t length = rows.prompt_len + step;  // tokens known so far
    const int64_t fed = cached && step > 0 ? 1 : length - prefilled;
    RuntimeValueMap call = StepFeeds(fixed, rows, inputs, length, fed);
    const auto start = std::chrono::steady_clock::now();
    RuntimeValueMap outputs;  // (no co_await inside ?: : GCC miscompiles it)
    if (runner)
      outputs = co_await options.step_runner(std::move(call), &row_caches);
    else
      outputs = co_await RunStep(state.get(), *session, context, std::move(call), wanted);
    if (runner && cancel != nullptr && cancel->cancelled()) break;  // cancelled meanwhile
    RecordStep(stats, step, start);
    const std::vector<int64_t> chosen = AppendNextTokens(
        rows, StepLogits(outputs, options.logits_name, rows.batch), sampler, options, pad);
    ++generated;
    if (on_token && !on_token(step, chosen)) break;
    if (std::all_of(rows.finished.begin(), rows.finished.end(), [](bool f) { return f; })) break;
  }
  co_return rows.Slice(options.input_ids_name, rows.tokens, 0, rows.prompt_len + generated);
}

Tensor Generate(std::shared_ptr<const RuntimeSession> session, RuntimeContext& context,
                RuntimeValueMap feeds, const GenerationOptions& options, TokenCallback on_token,
                const TaskCompletion* cancel, GenerationStats* stats) {
  return SyncWait(GenerateTask(std::move(session), context, std::move(feeds), options,
                               std::move(on_token), cancel, stats));
}

Tensor Generate(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                RuntimeValueMap feeds, const GenerationOptions& options,
                RuntimeSessionOptions session_options, TokenCallback on_token,
                const TaskCompletion* cancel, GenerationStats* stats) {
  return SyncWait(GenerateTask(std::move(model), context, std::move(feeds), options,
                               session_options, std::move(on_token), cancel, stats));
}

Tensor Generate(const ModelProto& model, RuntimeContext& context, RuntimeValueMap feeds,
                const GenerationOptions& options, RuntimeSessionOptions session_options) {
  // Non-owning alias: the caller keeps the model alive for the call (not cacheable).
  std::shared_ptr<const ModelProto> alias(std::shared_ptr<const ModelProto>(), &model);
  return Generate(std::make_shared<RuntimeSession>(std::move(alias), session_options), context,
                  std::move(feeds), options);
}

}  // namespace onnx_light::core::runtime
