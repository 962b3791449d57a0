// RequestScheduler: many generations at once on a model whose next token depends on the
// whole history kept in a bound cache. Exact tokens against Generate alone, the in-flight
// bound, the round-robin order of steps, cancellation, error isolation, stats, asio forms.
#include <doctest/doctest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <mutex>
#include <semaphore>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/text_parser.h"
#include "onnx_light.pb.h"
#include "state/request_scheduler.h"
#include "submit_gate.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

// logits = table[token] + sin(sum(history) * w): the cache `past` holds every token so far,
// so each prompt gives its own sequence and a wrong cache would change the tokens.
std::shared_ptr<const ModelProto> HistoryModel() {
  auto model = std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>"
      "history (int64[B, S] input_ids, float[B, P] past) => (float[B, S, 8] logits,"
      " float[B, Q] present)"
      "<float[8, 8] table = {0.1, 0.5, 0.2, 0.9, 0.3, 0.0, 0.7, 0.4,"
      "                      0.8, 0.1, 0.6, 0.2, 0.0, 0.9, 0.3, 0.5,"
      "                      0.2, 0.7, 0.1, 0.4, 0.9, 0.3, 0.0, 0.6,"
      "                      0.5, 0.0, 0.9, 0.1, 0.6, 0.2, 0.8, 0.3,"
      "                      0.3, 0.8, 0.4, 0.0, 0.2, 0.6, 0.1, 0.9,"
      "                      0.9, 0.2, 0.3, 0.7, 0.1, 0.4, 0.6, 0.0,"
      "                      0.0, 0.4, 0.8, 0.6, 0.5, 0.1, 0.9, 0.2,"
      "                      0.6, 0.3, 0.0, 0.5, 0.8, 0.7, 0.2, 0.1},"
      " float[8] w = {0.31, 0.77, 1.13, 1.59, 2.03, 2.41, 2.87, 3.33},"
      " int64[1] axis1 = {1}, int64[1] axis2 = {2}>"
      "{ f = Cast<to = 1>(input_ids)  present = Concat<axis = 1>(past, f)"
      "  s = ReduceSum<keepdims = 1>(present, axis1)  s3 = Unsqueeze(s, axis2)"
      "  sw = Mul(s3, w)  phase = Sin(sw)  g = Gather<axis = 0>(table, input_ids)"
      "  logits = Add(g, phase) }"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

RuntimeValueMap Feeds(std::vector<int64_t> prompt) {
  const int64_t len = static_cast<int64_t>(prompt.size());
  RuntimeValueMap feeds;
  feeds.emplace("input_ids",
                RuntimeValue(Tensor::FromInt64("input_ids", {1, len}, std::move(prompt))));
  feeds.emplace("past", RuntimeValue(Tensor("past", core::DataType::kFloat, {1, 0})));
  return feeds;
}

GenerationOptions Options(int64_t tokens) {
  GenerationOptions options;
  options.max_new_tokens = tokens;
  return options;
}

std::vector<int64_t> Alone(RuntimeContext& context, const std::vector<int64_t>& prompt,
                           int64_t tokens) {
  return Generate(HistoryModel(), context, Feeds(prompt), Options(tokens)).ToInt64Vector();
}

GenerationRequest Request(std::vector<int64_t> prompt, int64_t tokens,
                          TokenCallback on_token = nullptr) {
  GenerationRequest request;
  request.model = HistoryModel();
  request.feeds = Feeds(std::move(prompt));
  request.options = Options(tokens);
  request.on_token = std::move(on_token);
  return request;
}

const std::vector<std::vector<int64_t>> kPrompts = {{1},    {2, 3}, {4, 4, 4}, {7},
                                                    {0, 5}, {6},    {3, 1, 2}, {5, 7}};

}  // namespace

TEST_CASE("eight concurrent requests give exactly the tokens each gives alone") {
  RuntimeContext context(KernelContext(18));
  std::vector<std::vector<int64_t>> expected;
  for (const auto& prompt : kPrompts) expected.push_back(Alone(context, prompt, 12));
  // The model is not trivial: the eight prompts lead to seven different continuations.
  std::set<std::vector<int64_t>> continuations;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    continuations.emplace(expected[i].begin() + static_cast<long>(kPrompts[i].size()),
                          expected[i].end());
  CHECK(continuations.size() == 7);

  RequestScheduler scheduler(context, {.max_in_flight = 3});
  // In flight, as the requests themselves see it: first token seen, completion not yet.
  std::mutex mutex;
  int active = 0, most_active = 0;
  std::vector<RequestHandle> handles;
  test_util::SubmitGate gate;  // the first request waits until all are submitted
  for (const auto& prompt : kPrompts) {
    TokenCallback count = [&](int64_t step, const std::vector<int64_t>&) {
      if (step == 0) {
        std::lock_guard<std::mutex> lock(mutex);
        most_active = std::max(most_active, ++active);
      }
      return true;
    };
    handles.push_back(
        scheduler.Submit(Request(prompt, 12, handles.empty() ? gate.Hold(count) : count),
                         [&](std::exception_ptr, GenerationResult) {
                           std::lock_guard<std::mutex> lock(mutex);
                           --active;
                         }));
  }
  gate.Open();
  for (size_t i = 0; i < handles.size(); ++i) {
    GenerationResult result = handles[i].Get();
    CHECK(result.tokens.ToInt64Vector() == expected[i]);
    CHECK(result.stats.id == handles[i].id());
    CHECK(result.stats.tokens == 12);
    CHECK_FALSE(result.stats.cancelled);
  }
  scheduler.WaitIdle();
  CHECK(scheduler.peak_in_flight() == 3);
  CHECK(most_active <= 3);
  CHECK(most_active >= 1);
  CHECK(scheduler.in_flight() == 0);
  CHECK(scheduler.queued() == 0);
}

TEST_CASE("in-flight requests take turns one token at a time and admission is FIFO") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 3, .max_parallel_steps = 1});
  std::mutex mutex;
  std::vector<std::string> order;
  std::binary_semaphore release{0};
  auto record = [&](char name) {
    return [&, name](int64_t step, const std::vector<int64_t>&) {
      // Request A's first token waits until all four are submitted.
      if (name == 'A' && step == 0) release.acquire();
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(std::string(1, name) + std::to_string(step));
      return true;
    };
  };
  std::vector<RequestHandle> handles;
  handles.push_back(scheduler.Submit(Request({1}, 3, record('A'))));
  handles.push_back(scheduler.Submit(Request({2}, 3, record('B'))));
  handles.push_back(scheduler.Submit(Request({3}, 3, record('C'))));
  handles.push_back(scheduler.Submit(Request({4}, 3, record('D'))));  // queued: bound is 3
  CHECK(scheduler.queued() == 1);
  release.release();
  for (auto& h : handles) h.Get();
  scheduler.WaitIdle();
  CHECK(order == std::vector<std::string>{"A0", "B0", "C0", "A1", "B1", "C1", "A2", "B2", "C2",
                                          "D0", "D1", "D2"});
  CHECK(scheduler.peak_in_flight() == 3);
}

TEST_CASE("a cancelled request returns the tokens published so far and others are unaffected") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 1, .max_parallel_steps = 1});
  std::binary_semaphore at_first_token{0}, release{0};
  auto hold_first = [&](int64_t step, const std::vector<int64_t>&) {
    if (step == 0) {
      at_first_token.release();
      release.acquire();
    }
    return true;
  };
  RequestHandle a = scheduler.Submit(Request({1}, 8, hold_first));
  RequestHandle b = scheduler.Submit(Request({2}, 8));
  at_first_token.acquire();  // A has published its first token; B waits for the slot
  CHECK(scheduler.queued() == 1);

  // A queued request completes at once with its prompt.
  b.Cancel("client went away");
  CHECK(b.done());
  GenerationResult rb = b.Get();
  CHECK(rb.tokens.ToInt64Vector() == std::vector<int64_t>{2});
  CHECK(rb.stats.cancelled);
  CHECK(rb.stats.tokens == 0);
  CHECK(rb.stats.time_to_first_token_ns == -1);
  CHECK(b.completion()->reason() == "client went away");

  // A running request stops before its next token.
  a.Cancel();
  release.release();
  GenerationResult ra = a.Get();
  const std::vector<int64_t> full = Alone(context, {1}, 8);
  CHECK(ra.tokens.ToInt64Vector() == std::vector<int64_t>(full.begin(), full.begin() + 2));
  CHECK(ra.stats.cancelled);
  CHECK(ra.stats.tokens == 1);

  // The scheduler goes on serving.
  RequestHandle c = scheduler.Submit(Request({3}, 8));
  CHECK(c.Get().tokens.ToInt64Vector() == Alone(context, {3}, 8));
  CHECK_FALSE(c.Get().stats.cancelled);
  a.Cancel();  // after completion: no effect
  CHECK(a.Get().tokens.ToInt64Vector() == ra.tokens.ToInt64Vector());
}

TEST_CASE("a caller's TaskCompletion cancels its request between tokens") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 2});
  auto cancel = std::make_shared<TaskCompletion>();
  GenerationRequest request = Request({5}, 10, [&](int64_t step, const std::vector<int64_t>&) {
    if (step == 2) cancel->Cancel("enough");
    return true;
  });
  request.cancel = cancel;
  RequestHandle handle = scheduler.Submit(std::move(request));
  const std::vector<int64_t> full = Alone(context, {5}, 10);
  CHECK(handle.Get().tokens.ToInt64Vector() ==
        std::vector<int64_t>(full.begin(), full.begin() + 4));
  CHECK(handle.completion() == cancel);
}

TEST_CASE("an error in one request reaches only that request") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 2});
  RequestHandle good1 = scheduler.Submit(Request({1}, 6));
  GenerationRequest no_prompt = Request({2}, 6);
  no_prompt.feeds.erase("input_ids");
  RequestHandle bad_feeds = scheduler.Submit(std::move(no_prompt));
  RequestHandle bad_callback =
      scheduler.Submit(Request({3}, 6, [](int64_t step, const std::vector<int64_t>&) -> bool {
        if (step == 1) throw std::runtime_error("callback failed at step 1");
        return true;
      }));
  GenerationRequest wrong_cache = Request({4}, 6);
  wrong_cache.feeds.at("past") =
      RuntimeValue(Tensor::FromFloat("past", {1, 1}, {1.f}));  // not an empty prefix
  RequestHandle bad_cache = scheduler.Submit(std::move(wrong_cache));
  RequestHandle good2 = scheduler.Submit(Request({5}, 6));

  CHECK_THROWS_WITH_AS(bad_feeds.Get(), doctest::Contains("'input_ids'"), core::Error);
  CHECK_THROWS_WITH_AS(bad_callback.Get(), "callback failed at step 1", std::runtime_error);
  CHECK_THROWS_WITH_AS(bad_cache.Get(), doctest::Contains("initial cache 'past'"), core::Error);
  CHECK(good1.Get().tokens.ToInt64Vector() == Alone(context, {1}, 6));
  CHECK(good2.Get().tokens.ToInt64Vector() == Alone(context, {5}, 6));
  scheduler.WaitIdle();
  CHECK(scheduler.in_flight() == 0);
}

TEST_CASE("per-request stats report tokens, time to first token and per-token latencies") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 2});
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i) handles.push_back(scheduler.Submit(Request({i}, 5)));
  for (auto& h : handles) {
    const RequestStats stats = h.Get().stats;
    CHECK(stats.tokens == 5);
    REQUIRE(stats.token_latency_ns.size() == 5);
    for (int64_t ns : stats.token_latency_ns) CHECK(ns > 0);
    CHECK(stats.time_to_first_token_ns == stats.queue_wait_ns + stats.token_latency_ns[0]);
    CHECK(stats.total_ns >= stats.time_to_first_token_ns);
    CHECK(stats.generation.steps == 5);
    CHECK(stats.generation.step_ns.size() == 5);
    CHECK(stats.generation.used_persistent_state);
  }
}

TEST_CASE("a scheduler with no room for requests is rejected") {
  RuntimeContext context(KernelContext(18));
  CHECK_THROWS_WITH_AS(RequestScheduler(context, {.max_in_flight = 0}),
                       doctest::Contains("max_in_flight must be > 0"), core::Error);
}

namespace {
asio::awaitable<std::vector<int64_t>> Serve(RequestScheduler& scheduler, int64_t first) {
  std::vector<int64_t> prompt(1, first);  // (g++ 12 rejects a braced list in a coroutine)
  GenerationResult result =
      co_await scheduler.AsyncSubmit(Request(std::move(prompt), 7), asio::use_awaitable);
  co_return result.tokens.ToInt64Vector();
}
}  // namespace

TEST_CASE("AsyncSubmit completes through co_await, futures and cancellable callbacks") {
  RuntimeContext context(KernelContext(18));
  RequestScheduler scheduler(context, {.max_in_flight = 1, .max_parallel_steps = 1});

  // Three coroutines on one io_context thread, served concurrently.
  asio::io_context io;
  std::vector<std::vector<int64_t>> results(3);
  for (int64_t i = 0; i < 3; ++i) {
    asio::co_spawn(io, Serve(scheduler, i + 1),
                   [&results, i](std::exception_ptr e, std::vector<int64_t> tokens) {
                     CHECK_FALSE(e);
                     results[static_cast<size_t>(i)] = std::move(tokens);
                   });
  }
  io.run();
  for (int64_t i = 0; i < 3; ++i)
    CHECK(results[static_cast<size_t>(i)] == Alone(context, {i + 1}, 7));

  CHECK(scheduler.AsyncSubmit(Request({6}, 3), asio::use_future).get().tokens.ToInt64Vector() ==
        Alone(context, {6}, 3));

  // Emitting the handler's cancellation slot cancels a queued request at once.
  std::binary_semaphore at_first_token{0}, release{0};
  RequestHandle blocker =
      scheduler.Submit(Request({1}, 4, [&](int64_t step, const std::vector<int64_t>&) {
        if (step == 0) {
          at_first_token.release();
          release.acquire();
        }
        return true;
      }));
  at_first_token.acquire();
  asio::io_context io2;
  asio::cancellation_signal signal;
  std::vector<int64_t> cancelled_tokens;
  bool cancelled = false;
  scheduler.AsyncSubmit(
      Request({2, 3}, 4),
      asio::bind_cancellation_slot(
          signal.slot(), asio::bind_executor(io2, [&](std::exception_ptr e, GenerationResult r) {
            CHECK_FALSE(e);
            cancelled_tokens = r.tokens.ToInt64Vector();
            cancelled = r.stats.cancelled;
          })));
  signal.emit(asio::cancellation_type::terminal);
  io2.run();
  CHECK(cancelled);
  CHECK(cancelled_tokens == std::vector<int64_t>{2, 3});
  release.release();
  CHECK(blocker.Get().tokens.ToInt64Vector() == Alone(context, {1}, 4));
}
