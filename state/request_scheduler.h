// RequestScheduler: many generation requests at once, each with its own fresh state.
//
// Two modes, chosen per request from its model (RequestStats::mode, SchedulerStats):
// - "batched" (continuous batching, issue 15): when every persistent input of the model is
//   declared a sequence (row caches of ai.rt::PagedAttention, state/batch_rows.h) and no
//   node mixes the rows (DynamicQuantizeLinear's one range over its input), each
//   request's GenerateTask hands its model calls to the scheduler (GenerationOptions::
//   step_runner) and the scheduler runs one step for all of them once every running batched
//   request is waiting: calls whose feeds agree in names, dtypes and shapes past dim 0 (all
//   decode rows; prompts of one length) share one RunRows call (state/row_calls.h). A
//   request joins with its prompt call and leaves when its generation ends, between steps.
//   When a shared call fails, its calls are run one by one, so the error stays with the
//   request that causes it. A request cancelled while it waits for a step leaves the step.
// - "per_request" (any other model, or SchedulerOptions::batch_rows = false): the policy
//   below.
//
// KV budget (SchedulerOptions::max_kv_tokens or max_kv_bytes): admission waits until a request's
// charge fits; under KvAdmission::kGrowAndPreempt a batched request can be preempted between steps
// and recomputed when readmitted, unseen by its caller (same token stream, same sampler), or,
// under kGrowAndRefuse, fail with its own error.
//
// Per-request policy: FIFO admission with per-step round-robin interleaving. At most
// `max_in_flight` requests are admitted at a time; the rest wait in submission order. Every
// admitted request is a GenerateTask coroutine whose step gate (GenerationOptions::step_gate)
// suspends it after each token and puts it at the back of one ready queue; up to
// `max_parallel_steps` runner tasks on the shared TBB arena (AsyncRunArena) take the front
// of that queue and run one model call of it. So no in-flight request runs its next token
// before every other ready in-flight request has run one.
//
//   RequestScheduler scheduler(context, {.max_in_flight = 4});
//   RequestHandle handle = scheduler.Submit({model, feeds, options});   // future-like
//   GenerationResult result = handle.Get();                             // tokens + stats
//   GenerationResult r = co_await scheduler.AsyncSubmit(request, asio::use_awaitable);
//
// Each request owns its state (a PersistentValueState built on the model's session); the
// requests of one model object share that one session (SessionCache::Default(), or the
// request's own `session`): one plan, one set of kernels, one copy of packed weights, plus
// the RuntimeContext and the arena. One request's error or cancellation never affects
// another. Cancellation (RequestHandle::Cancel or the request's
// TaskCompletion) stops a request between tokens and returns the tokens published so far; a
// request still queued completes at once with its prompt.
//
// Threading: Submit, Cancel and Get may be called from any thread. Token and completion
// callbacks run on arena workers, never two at once for one request; keep them short. The
// destructor waits until every submitted request has completed.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/async_run.h"
#include "state/generate.h"
#include "state/task_completion.h"

namespace onnx_light::core::runtime {

// How the KV budget (SchedulerOptions::max_kv_tokens or max_kv_bytes) admits requests.
enum class KvAdmission {
  // Each request reserves its worst case, rows x (prompt + max_new_tokens), when admitted:
  // a running request never has to be preempted, but the budget is mostly unused.
  kReserveWorstCase,
  // Batched mode (row caches): a request is admitted when its prompt fits, and is charged
  // the tokens its caches actually hold, step by step. When a step's calls would exceed the
  // budget, the newest running request (highest id) is preempted: its caches are released
  // and it goes back to the front of the queue; readmitted, it recomputes its prompt and the
  // tokens generated so far as one call and continues (no token repeated or lost; the
  // sampler continues). Per-request-mode requests still reserve their worst case.
  kGrowAndPreempt,
  // As kGrowAndPreempt, but the newest running request fails instead (kResourceExhausted,
  // naming what its step needed and what the others hold): for callers who would rather retry
  // elsewhere than wait and recompute.
  kGrowAndRefuse,
};

struct SchedulerOptions {
  int64_t max_in_flight = 4;       // requests admitted at once; the others wait FIFO
  int64_t max_parallel_steps = 0;  // model calls running at once; 0 = the arena's concurrency
  bool batch_rows = true;  // batched mode for models with row caches; false: per_request always
  // KV budget in cached tokens over all admitted requests (0: none), charged as
  // `kv_admission` says; the queue head waits (FIFO) until its charge fits. A request whose
  // worst case alone, rows x (prompt + max_new_tokens), exceeds the budget fails at once
  // (kResourceExhausted).
  int64_t max_kv_tokens = 0;
  // The same budget in bytes (0: none; not with max_kv_tokens): each request's tokens cost
  // its model's KV bytes per token, read from the cache declarations (state/kv_cache_size.h),
  // paged caches in whole pages (each row's tokens rounded up to the block_size); a request
  // whose model's declarations give no size fails at once (kInvalidArgument).
  int64_t max_kv_bytes = 0;
  KvAdmission kv_admission = KvAdmission::kReserveWorstCase;
};

// What the scheduler ran so far.
struct SchedulerStats {
  std::string mode;  // "batched", "per_request", "mixed" (both ran), "" (none started yet)
  int64_t batched_requests = 0, per_request_requests = 0;  // requests started in each mode
  int64_t batched_calls = 0;                               // batched mode: model calls made
  int64_t max_batch_size = 0;  // the most rows one batched model call held
  int64_t kv_tokens_reserved = 0, peak_kv_tokens_reserved = 0;  // charged KV tokens
  int64_t kv_bytes_reserved = 0, peak_kv_bytes_reserved = 0;    // the same in bytes (max_kv_bytes)
  int64_t preemptions = 0;  // kGrowAndPreempt: requests preempted (each time counted)
  // The rows of each batched model call, in order (the last kMaxRecordedCalls).
  std::vector<int64_t> batch_sizes;
  static constexpr size_t kMaxRecordedCalls = 4096;
};

struct GenerationRequest {
  // The model (its session comes from SessionCache::Default(), keyed by this model object
  // and session_options), or a session to run on (then `model` and `session_options` are
  // not used).
  std::shared_ptr<const ModelProto> model;
  std::shared_ptr<const RuntimeSession> session;
  RuntimeValueMap feeds;  // as for Generate: input_ids, empty initial caches, fixed inputs
  GenerationOptions options;
  RuntimeSessionOptions session_options;
  TokenCallback on_token;                  // streaming: called after each of this request's tokens
  std::shared_ptr<TaskCompletion> cancel;  // optional; the scheduler creates one when null
};

struct RequestStats {
  int64_t id = -1;
  int64_t tokens = 0;                     // steps published (one token per prompt row each)
  int64_t queue_wait_ns = 0;              // submission -> first model call began
  int64_t time_to_first_token_ns = -1;    // submission -> first token (-1: none)
  std::vector<int64_t> token_latency_ns;  // per token: since the previous one (first: since
                                          // the request started running)
  int64_t total_ns = 0;                   // submission -> completion
  bool cancelled = false;
  int64_t preemptions = 0;         // times it was preempted (KvAdmission::kGrowAndPreempt)
  int64_t kv_bytes_per_token = 0;  // what max_kv_bytes charged a token (0: no byte budget)
  std::string mode;                // "batched" or "per_request" once it started running
  GenerationStats generation;      // wall time of each model call
};

struct GenerationResult {
  Tensor tokens;  // INT64 [batch, prompt + generated], as Generate returns
  RequestStats stats;
};

using RequestCallback = std::function<void(std::exception_ptr, GenerationResult)>;

namespace detail {
struct RequestRecord;
class SchedulerCore;
}  // namespace detail

// Future-like handle of one submitted request.
class RequestHandle {
 public:
  friend class RequestScheduler;
  RequestHandle() = default;
  explicit RequestHandle(std::shared_ptr<detail::RequestRecord> record)
      : record_(std::move(record)) {}

  int64_t id() const;
  bool done() const;
  // Blocks until the request completes; rethrows its error. May be called repeatedly.
  GenerationResult Get() const;
  // Stops the request before its next token (a queued request completes at once with its
  // prompt). Has no effect once the request completed.
  void Cancel(std::string reason = "cancelled") const;
  const std::shared_ptr<TaskCompletion>& completion() const;

 private:
  std::shared_ptr<detail::RequestRecord> record_;
};

class RequestScheduler {
 public:
  explicit RequestScheduler(RuntimeContext& context, SchedulerOptions options = {});
  ~RequestScheduler();
  RequestScheduler(const RequestScheduler&) = delete;
  RequestScheduler& operator=(const RequestScheduler&) = delete;

  // `on_done` (optional) runs on a worker when the request completes, before its slot is
  // given to the next queued request. The request is validated when it starts running:
  // its errors arrive through Get() / on_done.
  RequestHandle Submit(GenerationRequest request, RequestCallback on_done = nullptr);

  // asio completion-token form, signature void(std::exception_ptr, GenerationResult):
  // asio::use_awaitable, asio::use_future or a callback. The handler runs on its own
  // executor; emitting its cancellation slot cancels the request like Cancel().
  template <typename CompletionToken>
  auto AsyncSubmit(GenerationRequest request, CompletionToken&& token);

  // Blocks until no request is queued or in flight.
  void WaitIdle();

  const SchedulerOptions& options() const;
  int64_t queued() const;
  int64_t in_flight() const;
  int64_t peak_in_flight() const;  // the largest number in flight at any moment so far
  SchedulerStats stats() const;

 private:
  // Submit in two halves, so that AsyncSubmit connects cancellation before the request runs.
  RequestHandle Prepare(GenerationRequest request, RequestCallback on_done);
  void Enqueue(const RequestHandle& handle);

  std::shared_ptr<detail::SchedulerCore> core_;
};

template <typename CompletionToken>
auto RequestScheduler::AsyncSubmit(GenerationRequest request, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, GenerationResult)>(
      [this](auto handler, GenerationRequest request) {
        using Handler = decltype(handler);
        auto tracked = asio::prefer(asio::get_associated_executor(handler),
                                    asio::execution::outstanding_work.tracked);
        struct Op {
          Handler handler;
          decltype(tracked) executor;
        };
        auto op = std::make_shared<Op>(Op{std::move(handler), std::move(tracked)});
        RequestHandle handle =
            Prepare(std::move(request), [op](std::exception_ptr error, GenerationResult result) {
              auto ex = op->executor;
              asio::post(ex, [op, error, result = std::move(result)]() mutable {
                auto done_slot = asio::get_associated_cancellation_slot(op->handler);
                if (done_slot.is_connected()) done_slot.clear();
                std::move(op->handler)(error, std::move(result));
              });
            });
        auto slot = asio::get_associated_cancellation_slot(op->handler);
        if (slot.is_connected())
          slot.assign([handle](asio::cancellation_type) { handle.Cancel("asio cancellation"); });
        Enqueue(handle);
      },
      token, std::move(request));
}

}  // namespace onnx_light::core::runtime
