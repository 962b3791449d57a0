#include "state/request_scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <deque>
#include <mutex>
#include <optional>

#include "core/error.h"

namespace onnx_light::core::runtime {

namespace {

using Clock = std::chrono::steady_clock;

int64_t Nanos(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

void CancelQuietly(TaskCompletion& completion, const std::string& reason) {
  try {
    completion.Cancel(reason);
  } catch (const Error&) {
    // The token completed elsewhere (a caller-supplied token reused by a state run).
  }
}

}  // namespace

namespace detail {

struct RequestRecord {
  int64_t id = 0;
  GenerationRequest request;
  RequestCallback on_done;
  std::shared_ptr<TaskCompletion> cancel;
  std::weak_ptr<SchedulerCore> scheduler;
  Clock::time_point submitted, started, last_token;
  RequestStats stats;

  mutable std::mutex mutex;
  mutable std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
  GenerationResult result;

  // Stores the outcome, wakes Get() and runs on_done. Called exactly once.
  void Complete(std::exception_ptr err, Tensor tokens) {
    stats.total_ns = Nanos(Clock::now() - submitted);
    stats.cancelled = cancel->cancelled();
    stats.tokens = static_cast<int64_t>(stats.token_latency_ns.size());
    GenerationResult out{std::move(tokens), std::move(stats)};
    RequestCallback callback = std::move(on_done);
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      error = err;
      result = out;  // shares the token tensor's owner
    }
    finished.notify_all();
    // The request's inputs and callbacks are no longer needed: drop them (and what they
    // capture) now rather than when the last handle goes.
    request = GenerationRequest{};
    if (callback) callback(err, std::move(out));
  }

  // A request that never ran completes with its prompt (or with the error generate would
  // raise for its absence).
  void CompleteWithPrompt() {
    std::exception_ptr error;
    Tensor prompt;
    const std::string& name = request.options.input_ids_name;
    auto ids = request.feeds.find(name);
    if (ids != request.feeds.end() && ids->second.is_tensor()) {
      prompt = ids->second.tensor();
    } else {
      error = std::make_exception_ptr(
          Error(ErrorCode::kInvalidArgument,
                "generate: feeds must contain the token input '" + name + "'"));
    }
    Complete(error, std::move(prompt));
  }

  // The request's token callback (taken from the request), wrapped to record the time to
  // the first token and each token's latency before it runs.
  TokenCallback TakeTimedTokenCallback() {
    return [this, user = std::move(request.on_token)](int64_t step,
                                                      const std::vector<int64_t>& chosen) {
      const Clock::time_point now = Clock::now();
      if (stats.time_to_first_token_ns < 0) stats.time_to_first_token_ns = Nanos(now - submitted);
      stats.token_latency_ns.push_back(Nanos(now - last_token));
      last_token = now;
      return user ? user(step, chosen) : true;
    };
  }
};

// A coroutine that starts when first resumed and frees itself at the end: one per admitted
// request, it awaits the request's GenerateTask.
struct Driver {
  struct promise_type {
    Driver get_return_object() noexcept {
      return Driver{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

class SchedulerCore : public std::enable_shared_from_this<SchedulerCore> {
 public:
  SchedulerCore(RuntimeContext& context, SchedulerOptions options)
      : context_(context), options_(options) {
    OL_CHECK(options_.max_in_flight > 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: max_in_flight must be > 0, got " +
                 std::to_string(options_.max_in_flight));
    OL_CHECK(options_.max_parallel_steps >= 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: max_parallel_steps must be >= 0, got " +
                 std::to_string(options_.max_parallel_steps));
    max_runners_ = options_.max_parallel_steps > 0 ? options_.max_parallel_steps
                                                   : AsyncRunArena().max_concurrency();
  }

  const SchedulerOptions& options() const { return options_; }

  int64_t NextId() {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_id_++;
  }

  void Enqueue(std::shared_ptr<RequestRecord> record) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(record));
    AdmitLocked();
  }

  // A queued request that is cancelled completes at once with its prompt.
  void CancelQueued(const std::shared_ptr<RequestRecord>& record) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = std::find(pending_.begin(), pending_.end(), record);
      if (it == pending_.end()) return;  // running or done: the step loop sees the token
      pending_.erase(it);
    }
    record->CompleteWithPrompt();
    std::lock_guard<std::mutex> lock(mutex_);
    NotifyIfIdleLocked();
  }

  // Puts a suspended coroutine at the back of the ready queue.
  void MakeReady(std::coroutine_handle<> handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    MakeReadyLocked(handle);
  }

  // Called by a request's Driver once its generation ended (the frame then frees itself).
  void Finish(std::shared_ptr<RequestRecord> record, std::exception_ptr error, Tensor tokens) {
    record->Complete(error, std::move(tokens));
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    AdmitLocked();
    NotifyIfIdleLocked();
  }

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return IdleLocked(); });
  }

  int64_t queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(pending_.size());
  }
  int64_t in_flight() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_flight_;
  }
  int64_t peak_in_flight() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_in_flight_;
  }

  RuntimeContext& context() { return context_; }

 private:
  bool IdleLocked() const { return pending_.empty() && in_flight_ == 0 && runners_ == 0; }
  void NotifyIfIdleLocked() {
    if (IdleLocked()) idle_.notify_all();
  }

  void AdmitLocked() {
    while (in_flight_ < options_.max_in_flight && !pending_.empty()) {
      std::shared_ptr<RequestRecord> record = std::move(pending_.front());
      pending_.pop_front();
      ++in_flight_;
      peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
      // Created suspended: the body runs when a runner resumes it.
      MakeReadyLocked(Drive(this, std::move(record)).handle);
    }
  }

  void MakeReadyLocked(std::coroutine_handle<> handle) {
    ready_.push_back(handle);
    if (runners_ < max_runners_) {
      ++runners_;
      AsyncRunArena().enqueue([self = shared_from_this()] { self->RunnerLoop(); });
    }
  }

  // One runner: resumes ready coroutines in FIFO order until none is ready. Each resume
  // runs one model call of one request, up to its next step gate (or its end).
  void RunnerLoop() {
    for (;;) {
      std::coroutine_handle<> handle;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (ready_.empty()) {
          --runners_;
          NotifyIfIdleLocked();
          return;
        }
        handle = ready_.front();
        ready_.pop_front();
      }
      handle.resume();
    }
  }

  // The step gate: suspends the generation and queues it behind the other ready requests.
  struct Turn {
    SchedulerCore* core;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) const { core->MakeReady(handle); }
    void await_resume() const noexcept {}
  };
  static Task<void> YieldTurn(SchedulerCore* core) { co_await Turn{core}; }

  // The request's generation (not started: a Task runs when awaited), on its own session
  // when it names one, else on the cached session of its model. Takes the request's inputs.
  static Task<Tensor> StartGeneration(SchedulerCore* core, RequestRecord* r) {
    GenerationOptions options = std::move(r->request.options);
    options.step_gate = [core](int64_t) { return YieldTurn(core); };
    TokenCallback on_token = r->TakeTimedTokenCallback();
    if (r->request.session != nullptr)
      return GenerateTask(std::move(r->request.session), core->context(),
                          std::move(r->request.feeds), std::move(options), std::move(on_token),
                          r->cancel.get(), &r->stats.generation);
    return GenerateTask(std::move(r->request.model), core->context(), std::move(r->request.feeds),
                        std::move(options), r->request.session_options, std::move(on_token),
                        r->cancel.get(), &r->stats.generation);
  }

  static Driver Drive(SchedulerCore* core, std::shared_ptr<RequestRecord> record) {
    RequestRecord* r = record.get();
    r->started = Clock::now();
    r->last_token = r->started;
    r->stats.queue_wait_ns = Nanos(r->started - r->submitted);
    Tensor tokens;
    std::exception_ptr error;
    try {
      tokens = co_await StartGeneration(core, r);
    } catch (...) {
      error = std::current_exception();
    }
    core->Finish(std::move(record), error, std::move(tokens));
  }

  RuntimeContext& context_;
  const SchedulerOptions options_;
  int64_t max_runners_ = 1;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::deque<std::shared_ptr<RequestRecord>> pending_;
  std::deque<std::coroutine_handle<>> ready_;
  int64_t in_flight_ = 0;
  int64_t peak_in_flight_ = 0;
  int64_t runners_ = 0;
  int64_t next_id_ = 0;
};

}  // namespace detail

int64_t RequestHandle::id() const { return record_->id; }

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> lock(record_->mutex);
  return record_->done;
}

GenerationResult RequestHandle::Get() const {
  OL_CHECK(record_ != nullptr, ErrorCode::kFailedPrecondition,
           "RequestHandle: no request (default-constructed handle)");
  std::unique_lock<std::mutex> lock(record_->mutex);
  record_->finished.wait(lock, [&] { return record_->done; });
  if (record_->error) std::rethrow_exception(record_->error);
  return record_->result;
}

void RequestHandle::Cancel(std::string reason) const {
  if (record_ == nullptr) return;
  CancelQuietly(*record_->cancel, reason);
  if (auto core = record_->scheduler.lock()) core->CancelQueued(record_);
}

const std::shared_ptr<TaskCompletion>& RequestHandle::completion() const { return record_->cancel; }

RequestScheduler::RequestScheduler(RuntimeContext& context, SchedulerOptions options)
    : core_(std::make_shared<detail::SchedulerCore>(context, options)) {}

RequestScheduler::~RequestScheduler() { core_->WaitIdle(); }

RequestHandle RequestScheduler::Prepare(GenerationRequest request, RequestCallback on_done) {
  auto record = std::make_shared<detail::RequestRecord>();
  record->id = core_->NextId();
  record->stats.id = record->id;
  record->cancel = request.cancel ? request.cancel : std::make_shared<TaskCompletion>();
  record->request = std::move(request);
  record->on_done = std::move(on_done);
  record->scheduler = core_;
  return RequestHandle(std::move(record));
}

void RequestScheduler::Enqueue(const RequestHandle& handle) {
  handle.record_->submitted = Clock::now();
  core_->Enqueue(handle.record_);
}

RequestHandle RequestScheduler::Submit(GenerationRequest request, RequestCallback on_done) {
  RequestHandle handle = Prepare(std::move(request), std::move(on_done));
  Enqueue(handle);
  return handle;
}

void RequestScheduler::WaitIdle() { core_->WaitIdle(); }
const SchedulerOptions& RequestScheduler::options() const { return core_->options(); }
int64_t RequestScheduler::queued() const { return core_->queued(); }
int64_t RequestScheduler::in_flight() const { return core_->in_flight(); }
int64_t RequestScheduler::peak_in_flight() const { return core_->peak_in_flight(); }

}  // namespace onnx_light::core::runtime
