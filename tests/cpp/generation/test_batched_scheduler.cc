// RequestScheduler's batched mode (continuous batching, issue 15) on the row-caches decoder:
// 16 requests of different prompt lengths and stop conditions, some sampled, some cancelled
// from a token callback, some submitted late, share one model call per step and each gives
// exactly the tokens it gives alone through Generate; a bad request fails alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "core/error.h"
#include "executor/runtime_context.h"
#include "ops/ai_rt/paged_attention.h"
#include "rows_decoder.h"
#include "state/generate.h"
#include "state/request_scheduler.h"
#include "state/task_completion.h"
#include "submit_gate.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using test_util::RowsDecoder;
using test_util::RowsFeeds;
using test_util::TokenRow;

namespace {

struct Case {
  std::vector<int64_t> prompt;
  GenerationOptions options;
  int64_t cancel_at = -1;  // cancel from the callback of this step
  bool late = false;       // submitted from request 0's callback of step 2
  std::vector<int64_t> expected;
  std::shared_ptr<TaskCompletion> cancel = std::make_shared<TaskCompletion>();
  RequestHandle handle;
};

// The 16 requests: prompt lengths 1..11 (some equal: their prompts share a call), greedy
// and sampled, max_new_tokens or a stop token, cancellations and late joins.
std::vector<Case> Cases(const std::shared_ptr<const ModelProto>& model) {
  std::vector<Case> cases(16);
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    const int64_t len = 1 + static_cast<int64_t>(i * 7 % 11);
    for (int64_t t = 0; t < len; ++t)
      c.prompt.push_back((static_cast<int64_t>(i) * 13 + t * 5) % 40);
    c.options.max_new_tokens = i == 0 ? 24 : 4 + static_cast<int64_t>(i % 5) * 3;
    if (i % 4 == 3) {
      c.options.temperature = 0.8f;
      c.options.top_k = 10;
      c.options.seed = 100 + i;
    }
    c.cancel_at = i % 5 == 2 ? 2 : -1;
    c.late = i >= 12;
  }
  RuntimeContext context;
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    std::vector<int64_t> alone = TokenRow(Generate(model, context, RowsFeeds(c.prompt), c.options));
    // Stop tokens: requests 1, 6 and 11 stop at their own third new token.
    if (i % 5 == 1) {
      c.options.stop_token_ids = {alone[c.prompt.size() + 2]};
      alone = TokenRow(Generate(model, context, RowsFeeds(c.prompt), c.options));
      CHECK(alone.size() <= c.prompt.size() + 3);
    }
    if (c.cancel_at >= 0) alone.resize(c.prompt.size() + static_cast<size_t>(c.cancel_at) + 1);
    c.expected = alone;
  }
  return cases;
}

}  // namespace

TEST_CASE(
    "The batched scheduler runs one model call per step for all running requests, and every "
    "request (sampled, stopped, cancelled or joining late) gives the tokens it gives alone") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  std::vector<Case> cases = Cases(model);
  RuntimeContext context;
  RequestScheduler scheduler(context, {.max_in_flight = 16});
  std::mutex mutex;
  // Cancels from its own callback; request 0's callback of step 2 submits the late ones.
  auto request_of = [&](Case& c) {
    GenerationRequest request{model,   nullptr, RowsFeeds(c.prompt), c.options, {},
                              nullptr, c.cancel};
    request.on_token = [&c](int64_t step, const std::vector<int64_t>&) {
      if (step == c.cancel_at) c.cancel->Cancel("enough");
      return true;
    };
    return request;
  };
  auto submit = [&](Case& c) {
    GenerationRequest request = request_of(c);
    if (&c == &cases[0])
      request.on_token = [&](int64_t step, const std::vector<int64_t>&) {
        if (step != 2) return true;
        std::lock_guard<std::mutex> lock(mutex);
        for (Case& late : cases)
          if (late.late) late.handle = scheduler.Submit(request_of(late));
        return true;
      };
    RequestHandle handle = scheduler.Submit(std::move(request));
    std::lock_guard<std::mutex> lock(mutex);
    c.handle = handle;
  };
  for (Case& c : cases)
    if (!c.late) submit(c);
  scheduler.WaitIdle();
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const GenerationResult result = cases[i].handle.Get();
    CHECK(TokenRow(result.tokens) == cases[i].expected);
    CHECK(result.stats.mode == "batched");
    CHECK(result.stats.cancelled == (cases[i].cancel_at >= 0));
  }
  const SchedulerStats stats = scheduler.stats();
  CHECK(stats.mode == "batched");
  CHECK(stats.batched_requests == 16);
  CHECK(stats.per_request_requests == 0);
  // Request 0 decodes 24 tokens while the late ones (3+ tokens each) join it.
  CHECK(stats.max_batch_size > 1);
  int64_t tokens = 0, rows = 0;
  for (const Case& c : cases) tokens += static_cast<int64_t>(c.expected.size() - c.prompt.size());
  for (int64_t b : stats.batch_sizes) rows += b;
  CHECK(stats.batched_calls == static_cast<int64_t>(stats.batch_sizes.size()));
  CHECK(stats.batched_calls < tokens);  // far fewer calls than tokens
  CHECK(rows >= tokens);                // every token came from a row (cancelled ones drop one)
}

// The error message Generate gives for `feeds` alone.
std::string AloneError(const std::shared_ptr<const ModelProto>& model, RuntimeValueMap feeds) {
  RuntimeContext context;
  try {
    Generate(model, context, std::move(feeds), GenerationOptions{});
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE(
    "A request whose row makes the shared call fail fails alone with its own error, and the "
    "requests that shared its call finish with exact tokens") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  const std::vector<int64_t> good_prompt = {4, 9, 2}, bad_prompt = {4, 99, 2};  // vocab 40
  const std::string expected_error = AloneError(model, RowsFeeds(bad_prompt));
  REQUIRE(expected_error.find("99") != std::string::npos);
  RuntimeContext context;
  GenerationOptions options;
  options.max_new_tokens = 8;
  const std::vector<int64_t> alone_good =
      TokenRow(Generate(model, context, RowsFeeds(good_prompt), options));
  const std::vector<int64_t> alone_long =
      TokenRow(Generate(model, context, RowsFeeds({7, 7}), options));
  RequestScheduler scheduler(context, {.max_in_flight = 8});
  RequestHandle bad, good;
  std::mutex mutex;
  // Both join from the first request's callback: their prompts (length 3) share one call.
  GenerationRequest first{model, nullptr, RowsFeeds({7, 7}), options, {}, nullptr, nullptr};
  first.on_token = [&](int64_t step, const std::vector<int64_t>&) {
    if (step != 1) return true;
    std::lock_guard<std::mutex> lock(mutex);
    bad = scheduler.Submit({model, nullptr, RowsFeeds(bad_prompt), options, {}, nullptr, nullptr});
    good =
        scheduler.Submit({model, nullptr, RowsFeeds(good_prompt), options, {}, nullptr, nullptr});
    return true;
  };
  RequestHandle long_one = scheduler.Submit(std::move(first));
  scheduler.WaitIdle();
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(TokenRow(long_one.Get().tokens) == alone_long);
  CHECK(TokenRow(good.Get().tokens) == alone_good);
  try {
    bad.Get();
    FAIL("expected the bad request's error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == expected_error);
  }
  CHECK(scheduler.stats().max_batch_size == 2);  // the good and the first decoded together
}

TEST_CASE("The scheduler keeps per-request steps when asked, with the same tokens") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  GenerationOptions options;
  options.max_new_tokens = 6;
  const std::vector<int64_t> alone =
      TokenRow(Generate(model, context, RowsFeeds({3, 1, 4}), options));
  RequestScheduler scheduler(context, {.max_in_flight = 2, .batch_rows = false});
  RequestHandle a =
      scheduler.Submit({model, nullptr, RowsFeeds({3, 1, 4}), options, {}, nullptr, nullptr});
  RequestHandle b =
      scheduler.Submit({model, nullptr, RowsFeeds({3, 1, 4}), options, {}, nullptr, nullptr});
  CHECK(TokenRow(a.Get().tokens) == alone);
  CHECK(TokenRow(b.Get().tokens) == alone);
  CHECK(a.Get().stats.mode == "per_request");
  scheduler.WaitIdle();
  CHECK(scheduler.stats().mode == "per_request");
  CHECK(scheduler.stats().batched_calls == 0);
}

TEST_CASE("prefill_chunk must not be negative") {
  RuntimeContext context;
  GenerationOptions options;
  options.prefill_chunk = -2;
  test_util::ExpectError(
      [&] {
        Generate(RowsDecoder(), context, RowsFeeds({1, 2}), options);
      },
      ErrorCode::kInvalidArgument, "prefill_chunk must be >= 0, got -2");
}

TEST_CASE(
    "Chunked prefill: a joining prompt is fed in chunks that share steps with the decode "
    "rows, and gives the tokens Generate gives with the same chunks") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  const std::vector<int64_t> long_prompt = {5, 3, 9, 1, 30, 22, 8, 8, 17, 2, 11};  // 4 + 4 + 3
  GenerationOptions decode, chunked;
  decode.max_new_tokens = 12;
  chunked.max_new_tokens = 5;
  chunked.prefill_chunk = 4;
  RuntimeContext context;
  const std::vector<int64_t> alone_first =
      TokenRow(Generate(model, context, RowsFeeds({7, 1}), decode));
  const std::vector<int64_t> alone_chunked =
      TokenRow(Generate(model, context, RowsFeeds(long_prompt), chunked));
  // One runner: the steps' requests resume in joining order, so the counts below are exact.
  RequestScheduler scheduler(context, {.max_in_flight = 4, .max_parallel_steps = 1});
  std::mutex mutex;
  RequestHandle joining;
  int64_t first_tokens = 0, first_tokens_at_join = -1;
  GenerationRequest first{model, nullptr, RowsFeeds({7, 1}), decode, {}, nullptr, nullptr};
  first.on_token = [&](int64_t step, const std::vector<int64_t>&) {
    std::lock_guard<std::mutex> lock(mutex);
    ++first_tokens;
    if (step != 1) return true;
    GenerationRequest late{model, nullptr, RowsFeeds(long_prompt), chunked, {}, nullptr, nullptr};
    late.on_token = [&](int64_t late_step, const std::vector<int64_t>&) {
      std::lock_guard<std::mutex> inner(mutex);
      if (late_step == 0) first_tokens_at_join = first_tokens;
      return true;
    };
    joining = scheduler.Submit(std::move(late));
    return true;
  };
  RequestHandle first_handle = scheduler.Submit(std::move(first));
  scheduler.WaitIdle();
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(TokenRow(first_handle.Get().tokens) == alone_first);
  CHECK(TokenRow(joining.Get().tokens) == alone_chunked);
  // Joined after the first request's 2nd token; its three chunk calls ran in the next three
  // steps, each beside one decode row of the first request.
  CHECK(first_tokens_at_join == 5);
  CHECK(joining.Get().stats.generation.steps == 5);
}

TEST_CASE(
    "A KV budget admits requests while their worst-case caches fit, keeps the others queued, "
    "and refuses one that can never fit") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  GenerationOptions options;
  options.max_new_tokens = 8;  // each request: 1 x (3 + 8) = 11 tokens
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {9, 2, 4}};
  RequestScheduler scheduler(context, {.max_in_flight = 8, .max_kv_tokens = 30});
  std::vector<RequestHandle> handles =
      test_util::SubmitTogether(scheduler, model, prompts, options);
  GenerationOptions long_options;
  long_options.max_new_tokens = 28;  // 1 x (3 + 28) = 31 > 30
  RequestHandle too_big =
      scheduler.Submit({model, nullptr, RowsFeeds({1, 1, 1}), long_options, {}, nullptr, nullptr});
  CHECK(too_big.done());
  test_util::ExpectError([&] { too_big.Get(); }, ErrorCode::kResourceExhausted,
                         "RequestScheduler: request 4 needs 31 KV tokens (rows x (prompt + "
                         "max_new_tokens)) but max_kv_tokens is 30");
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(TokenRow(handles[i].Get().tokens) ==
          TokenRow(Generate(model, context, RowsFeeds(prompts[i]), options)));
  scheduler.WaitIdle();
  CHECK(scheduler.peak_in_flight() == 2);  // 3 x 11 > 30
  CHECK(scheduler.stats().peak_kv_tokens_reserved == 22);
  CHECK(scheduler.stats().kv_tokens_reserved == 0);
  test_util::ExpectError([&] { RequestScheduler bad(context, {.max_kv_tokens = -1}); },
                         ErrorCode::kInvalidArgument,
                         "RequestScheduler: max_kv_tokens must be >= 0, got -1");
}

namespace {

// What a request's token callback saw: the step indices and the tokens, in order.
struct Streamed {
  std::mutex mutex;
  std::vector<int64_t> steps, tokens;
  TokenCallback Callback() {
    return [this](int64_t step, const std::vector<int64_t>& chosen) {
      std::lock_guard<std::mutex> lock(mutex);
      steps.push_back(step);
      tokens.push_back(chosen[0]);
      return true;
    };
  }
  // Steps 0, 1, 2, ... (none repeated or skipped) whose tokens follow the prompt in `row`.
  bool Matches(const std::vector<int64_t>& row, size_t prompt) {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i] != static_cast<int64_t>(i)) return false;
    return std::vector<int64_t>(row.begin() + static_cast<std::ptrdiff_t>(prompt), row.end()) ==
           tokens;
  }
};

SchedulerOptions Preempting(int64_t max_kv_tokens) {
  return {.max_in_flight = 16,
          .max_kv_tokens = max_kv_tokens,
          .kv_admission = KvAdmission::kGrowAndPreempt};
}

}  // namespace

TEST_CASE(
    "grow_and_preempt: under a budget that forces preemption, 12 requests (greedy and sampled, "
    "prompts of 1 to 11 tokens, some chunked) stream and return exactly the tokens each gives "
    "alone") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  constexpr size_t kRequests = 12;
  std::vector<std::vector<int64_t>> prompts(kRequests);
  std::vector<GenerationOptions> options(kRequests);
  std::vector<std::vector<int64_t>> alone(kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    for (size_t t = 0; t < 1 + i * 5 % 11; ++t)
      prompts[i].push_back(static_cast<int64_t>((i * 11 + t * 7) % 40));
    options[i].max_new_tokens = 6 + static_cast<int64_t>(i % 4) * 3;  // worst case <= 26
    if (i % 3 == 2) {
      options[i].temperature = 0.9f;
      options[i].top_k = 8;
      options[i].seed = 7 + i;
    }
    if (i % 4 == 1) options[i].prefill_chunk = 3;  // a recompute also covers chunks
    alone[i] = TokenRow(Generate(model, context, RowsFeeds(prompts[i]), options[i]));
  }
  constexpr int64_t kBudget = 40;
  RequestScheduler scheduler(context, Preempting(kBudget));
  std::vector<Streamed> streamed(kRequests);
  std::vector<RequestHandle> handles;
  test_util::SubmitGate gate;
  for (size_t i = 0; i < kRequests; ++i) {
    GenerationRequest request{model,   nullptr, RowsFeeds(prompts[i]), options[i], {},
                              nullptr, nullptr};
    request.on_token = i == 0 ? gate.Hold(streamed[i].Callback()) : streamed[i].Callback();
    handles.push_back(scheduler.Submit(std::move(request)));
  }
  gate.Open();
  int64_t preemptions = 0;
  for (size_t i = 0; i < kRequests; ++i) {
    CAPTURE(i);
    const GenerationResult result = handles[i].Get();
    CHECK(TokenRow(result.tokens) == alone[i]);
    CHECK(streamed[i].Matches(alone[i], prompts[i].size()));
    CHECK(result.stats.tokens == options[i].max_new_tokens);
    preemptions += result.stats.preemptions;
  }
  scheduler.WaitIdle();
  const SchedulerStats stats = scheduler.stats();
  CHECK(stats.preemptions > 0);
  CHECK(stats.preemptions == preemptions);
  CHECK(stats.peak_kv_tokens_reserved <= kBudget);
  CHECK(stats.kv_tokens_reserved == 0);
  CHECK(stats.max_batch_size > 1);
}

TEST_CASE(
    "grow_and_preempt: a request cancelled while preempted ends cancelled with the tokens it "
    "streamed, and one that can never fit is refused naming its need and the budget") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  GenerationOptions older_options, newer_options;
  older_options.max_new_tokens = 16;  // 2 + 16 = 18 <= 20
  newer_options.max_new_tokens = 14;  // 4 + 14 = 18 <= 20
  const std::vector<int64_t> older_prompt = {3, 9}, newer_prompt = {8, 1, 5, 2};
  const std::vector<int64_t> older_alone =
      TokenRow(Generate(model, context, RowsFeeds(older_prompt), older_options));
  const std::vector<int64_t> newer_alone =
      TokenRow(Generate(model, context, RowsFeeds(newer_prompt), newer_options));
  // Both caches grow by one token per step until the newer one is preempted; it cannot come
  // back before the older one ends (their caches then exceed 20), so the older one's first
  // token after the preemption cancels it while it is preempted.
  RequestScheduler scheduler(context, Preempting(20));
  Streamed newer_streamed;
  std::mutex mutex;
  RequestHandle newer;
  auto newer_token = std::make_shared<TaskCompletion>();
  bool cancelled = false;
  // Through its handle (taken out of the queue at once), or through its own token (it ends
  // when the scheduler next admits, here when the older one ends).
  bool through_handle = true;
  SUBCASE("cancelled through its handle") { through_handle = true; }
  SUBCASE("cancelled through its own TaskCompletion") { through_handle = false; }
  GenerationRequest older{model,   nullptr, RowsFeeds(older_prompt), older_options, {},
                          nullptr, nullptr};
  test_util::SubmitGate gate;  // the older one must not end before the newer one joins
  older.on_token = gate.Hold([&](int64_t, const std::vector<int64_t>&) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!cancelled && scheduler.stats().preemptions == 1) {
      if (through_handle)
        newer.Cancel("preempted and no longer wanted");
      else
        newer_token->Cancel("preempted and no longer wanted");
      cancelled = true;
    }
    return true;
  });
  RequestHandle older_handle = scheduler.Submit(std::move(older));
  {
    GenerationRequest request{model,   nullptr,    RowsFeeds(newer_prompt), newer_options, {},
                              nullptr, newer_token};
    request.on_token = newer_streamed.Callback();
    std::lock_guard<std::mutex> lock(mutex);
    newer = scheduler.Submit(std::move(request));
  }
  gate.Open();
  GenerationOptions long_options;
  long_options.max_new_tokens = 18;  // 1 x (3 + 18) = 21 > 20
  RequestHandle too_big =
      scheduler.Submit({model, nullptr, RowsFeeds({1, 1, 1}), long_options, {}, nullptr, nullptr});
  test_util::ExpectError([&] { too_big.Get(); }, ErrorCode::kResourceExhausted,
                         "RequestScheduler: request 2 needs 21 KV tokens (rows x (prompt + "
                         "max_new_tokens)) but max_kv_tokens is 20");
  CHECK(TokenRow(older_handle.Get().tokens) == older_alone);
  const GenerationResult result = newer.Get();
  const std::vector<int64_t> row = TokenRow(result.tokens);
  CHECK(result.stats.cancelled);
  CHECK(result.stats.preemptions == 1);
  CHECK(newer.completion()->reason() == "preempted and no longer wanted");
  REQUIRE(row.size() > newer_prompt.size());
  REQUIRE(row.size() < newer_alone.size());
  CHECK(row == std::vector<int64_t>(newer_alone.begin(),
                                    newer_alone.begin() + static_cast<std::ptrdiff_t>(row.size())));
  CHECK(newer_streamed.Matches(row, newer_prompt.size()));
  scheduler.WaitIdle();
  CHECK(scheduler.stats().preemptions == 1);
  CHECK(scheduler.stats().kv_tokens_reserved == 0);
}

TEST_CASE("grow_and_preempt: per-request-mode requests still reserve their worst case") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  GenerationOptions options;
  options.max_new_tokens = 5;  // 1 x (3 + 5) = 8
  SchedulerOptions per_request = Preempting(20);
  per_request.batch_rows = false;
  RequestScheduler scheduler(context, per_request);
  test_util::SubmitGate gate;  // a must not end before b is submitted
  RequestHandle a =
      scheduler.Submit({model, nullptr, RowsFeeds({3, 1, 4}), options, {}, gate.Hold(), nullptr});
  RequestHandle b =
      scheduler.Submit({model, nullptr, RowsFeeds({2, 7, 1}), options, {}, nullptr, nullptr});
  gate.Open();
  CHECK(TokenRow(a.Get().tokens) ==
        TokenRow(Generate(model, context, RowsFeeds({3, 1, 4}), options)));
  CHECK(TokenRow(b.Get().tokens) ==
        TokenRow(Generate(model, context, RowsFeeds({2, 7, 1}), options)));
  scheduler.WaitIdle();
  CHECK(scheduler.stats().peak_kv_tokens_reserved == 16);
  CHECK(scheduler.stats().preemptions == 0);
}

TEST_CASE(
    "grow_and_refuse: the newest request that cannot grow fails with its own error, the "
    "others finish with their alone tokens") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  GenerationOptions older_options, newer_options;
  older_options.max_new_tokens = 16;  // 2 + 16 = 18 <= 20
  newer_options.max_new_tokens = 14;  // 4 + 14 = 18 <= 20
  const std::vector<int64_t> older_prompt = {3, 9}, newer_prompt = {8, 1, 5, 2};
  const std::vector<int64_t> newer_alone =
      TokenRow(Generate(model, context, RowsFeeds(newer_prompt), newer_options));
  RequestScheduler scheduler(
      context,
      {.max_in_flight = 4, .max_kv_tokens = 20, .kv_admission = KvAdmission::kGrowAndRefuse});
  Streamed newer_streamed;
  test_util::SubmitGate gate;  // the older one must not end before the newer one joins
  RequestHandle older = scheduler.Submit(
      {model, nullptr, RowsFeeds(older_prompt), older_options, {}, gate.Hold(), nullptr});
  GenerationRequest request{model,   nullptr, RowsFeeds(newer_prompt), newer_options, {},
                            nullptr, nullptr};
  request.on_token = newer_streamed.Callback();
  RequestHandle newer = scheduler.Submit(std::move(request));
  gate.Open();
  test_util::ExpectError([&] { newer.Get(); }, ErrorCode::kResourceExhausted,
                         {"RequestScheduler: request 1 cannot grow its KV cache: its next step "
                          "needs ",
                          " of max_kv_tokens 20 (kv_admission grow_and_refuse)"});
  CHECK(TokenRow(older.Get().tokens) ==
        TokenRow(Generate(model, context, RowsFeeds(older_prompt), older_options)));
  // What it streamed before failing is its alone run's start.
  std::vector<int64_t> streamed;
  {
    std::lock_guard<std::mutex> lock(newer_streamed.mutex);
    streamed = newer_streamed.tokens;
  }
  REQUIRE(!streamed.empty());
  REQUIRE(streamed.size() < 14);
  CHECK(std::equal(streamed.begin(), streamed.end(), newer_alone.begin() + 4));
  scheduler.WaitIdle();
  CHECK(scheduler.stats().preemptions == 0);
  CHECK(scheduler.stats().kv_tokens_reserved == 0);
}
