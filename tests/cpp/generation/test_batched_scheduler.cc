// RequestScheduler's batched mode (continuous batching, issue 15) on the row-caches decoder:
// 16 requests of different prompt lengths and stop conditions, some sampled, some cancelled
// from a token callback, some submitted late, share one model call per step and each gives
// exactly the tokens it gives alone through Generate; a bad request fails alone.
#include <doctest/doctest.h>

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

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using test_util::RowsDecoder;

namespace {

RuntimeValueMap Feeds(const std::vector<int64_t>& prompt) {
  RuntimeValueMap feeds;
  feeds["input_ids"] = RuntimeValue(
      Tensor::FromInt64("input_ids", {1, static_cast<int64_t>(prompt.size())}, prompt));
  feeds["past"] = PagedAttention::AssembleRows({PagedAttention::EmptyCache()});
  return feeds;
}

std::vector<int64_t> Row(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

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
    std::vector<int64_t> alone = Row(Generate(model, context, Feeds(c.prompt), c.options));
    // Stop tokens: requests 1, 6 and 11 stop at their own third new token.
    if (i % 5 == 1) {
      c.options.stop_token_ids = {alone[c.prompt.size() + 2]};
      alone = Row(Generate(model, context, Feeds(c.prompt), c.options));
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
    GenerationRequest request{model, nullptr, Feeds(c.prompt), c.options, {}, nullptr, c.cancel};
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
    CHECK(Row(result.tokens) == cases[i].expected);
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
  const std::string expected_error = AloneError(model, Feeds(bad_prompt));
  REQUIRE(expected_error.find("99") != std::string::npos);
  RuntimeContext context;
  GenerationOptions options;
  options.max_new_tokens = 8;
  const std::vector<int64_t> alone_good =
      Row(Generate(model, context, Feeds(good_prompt), options));
  const std::vector<int64_t> alone_long = Row(Generate(model, context, Feeds({7, 7}), options));
  RequestScheduler scheduler(context, {.max_in_flight = 8});
  RequestHandle bad, good;
  std::mutex mutex;
  // Both join from the first request's callback: their prompts (length 3) share one call.
  GenerationRequest first{model, nullptr, Feeds({7, 7}), options, {}, nullptr, nullptr};
  first.on_token = [&](int64_t step, const std::vector<int64_t>&) {
    if (step != 1) return true;
    std::lock_guard<std::mutex> lock(mutex);
    bad = scheduler.Submit({model, nullptr, Feeds(bad_prompt), options, {}, nullptr, nullptr});
    good = scheduler.Submit({model, nullptr, Feeds(good_prompt), options, {}, nullptr, nullptr});
    return true;
  };
  RequestHandle long_one = scheduler.Submit(std::move(first));
  scheduler.WaitIdle();
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(Row(long_one.Get().tokens) == alone_long);
  CHECK(Row(good.Get().tokens) == alone_good);
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
  const std::vector<int64_t> alone = Row(Generate(model, context, Feeds({3, 1, 4}), options));
  RequestScheduler scheduler(context, {.max_in_flight = 2, .batch_rows = false});
  RequestHandle a =
      scheduler.Submit({model, nullptr, Feeds({3, 1, 4}), options, {}, nullptr, nullptr});
  RequestHandle b =
      scheduler.Submit({model, nullptr, Feeds({3, 1, 4}), options, {}, nullptr, nullptr});
  CHECK(Row(a.Get().tokens) == alone);
  CHECK(Row(b.Get().tokens) == alone);
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
        Generate(RowsDecoder(), context, Feeds({1, 2}), options);
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
  const std::vector<int64_t> alone_first = Row(Generate(model, context, Feeds({7, 1}), decode));
  const std::vector<int64_t> alone_chunked =
      Row(Generate(model, context, Feeds(long_prompt), chunked));
  // One runner: the steps' requests resume in joining order, so the counts below are exact.
  RequestScheduler scheduler(context, {.max_in_flight = 4, .max_parallel_steps = 1});
  std::mutex mutex;
  RequestHandle joining;
  int64_t first_tokens = 0, first_tokens_at_join = -1;
  GenerationRequest first{model, nullptr, Feeds({7, 1}), decode, {}, nullptr, nullptr};
  first.on_token = [&](int64_t step, const std::vector<int64_t>&) {
    std::lock_guard<std::mutex> lock(mutex);
    ++first_tokens;
    if (step != 1) return true;
    GenerationRequest late{model, nullptr, Feeds(long_prompt), chunked, {}, nullptr, nullptr};
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
  CHECK(Row(first_handle.Get().tokens) == alone_first);
  CHECK(Row(joining.Get().tokens) == alone_chunked);
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
  std::vector<RequestHandle> handles;
  for (const auto& p : prompts)
    handles.push_back(scheduler.Submit({model, nullptr, Feeds(p), options, {}, nullptr, nullptr}));
  GenerationOptions long_options;
  long_options.max_new_tokens = 28;  // 1 x (3 + 28) = 31 > 30
  RequestHandle too_big =
      scheduler.Submit({model, nullptr, Feeds({1, 1, 1}), long_options, {}, nullptr, nullptr});
  CHECK(too_big.done());
  test_util::ExpectError([&] { too_big.Get(); }, ErrorCode::kResourceExhausted,
                         "RequestScheduler: request 4 needs 31 KV tokens (rows x (prompt + "
                         "max_new_tokens)) but max_kv_tokens is 30");
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(Row(handles[i].Get().tokens) ==
          Row(Generate(model, context, Feeds(prompts[i]), options)));
  scheduler.WaitIdle();
  CHECK(scheduler.peak_in_flight() == 2);  // 3 x 11 > 30
  CHECK(scheduler.stats().peak_kv_tokens_reserved == 22);
  CHECK(scheduler.stats().kv_tokens_reserved == 0);
  test_util::ExpectError([&] { RequestScheduler bad(context, {.max_kv_tokens = -1}); },
                         ErrorCode::kInvalidArgument,
                         "RequestScheduler: max_kv_tokens must be >= 0, got -1");
}
