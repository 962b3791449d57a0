#include "state/request_scheduler.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "core/checked_math.h"
#include "core/error.h"
#include "executor/session_cache.h"
#include "onnx_light.pb.h"
#include "state/kv_cache_size.h"
#include "state/row_calls.h"

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

using TokenRows = std::vector<std::vector<int64_t>>;  // per batch row

// Appends each row of the INT64 [rows, n] tensor `t` to its row of `rows`.
void AppendRows(TokenRows& rows, const Tensor& t) {
  const Tensor c = t.Contiguous();
  const int64_t n = c.dim(1);
  rows.resize(static_cast<size_t>(c.dim(0)));
  for (size_t b = 0; b < rows.size(); ++b)
    rows[b].insert(rows[b].end(), c.data<int64_t>() + static_cast<int64_t>(b) * n,
                   c.data<int64_t>() + static_cast<int64_t>(b + 1) * n);
}

// `rows` followed by the columns of `t`, as an INT64 [rows, length] tensor.
Tensor Joined(const std::string& name, TokenRows rows, const Tensor& t) {
  AppendRows(rows, t);
  std::vector<int64_t> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const auto count = static_cast<int64_t>(rows.size());
  return Tensor::FromInt64(name, {count, count == 0 ? 0 : static_cast<int64_t>(rows[0].size())},
                           std::move(flat));
}

}  // namespace

namespace detail {

// A batched request's model call waiting for the next step.
struct PendingCall {
  RowCall call;
  RequestRecord* record = nullptr;
  std::coroutine_handle<> handle;  // the suspended call, resumed after the step
  Tensor fed_ids, fed_positions;   // kGrowAndPreempt: the tokens this call adds to the caches
};

// A batched request's cached tokens under KvAdmission::kGrowAndPreempt: the ids and positions
// of every call its row caches hold, so that once preempted it recomputes them in one call.
struct RowHistory {
  std::string ids_name, positions_name;       // the request's feed names
  std::vector<RuntimeValueMap> initial_rows;  // its row caches before its first call
  TokenRows ids, positions;
  PendingCall* parked = nullptr;  // preempted: the call it stopped at, run when readmitted

  int64_t Tokens() const {
    return ids.empty() ? 0 : static_cast<int64_t>(ids.size() * ids[0].size());
  }
};

struct RequestRecord : std::enable_shared_from_this<RequestRecord> {
  int64_t id = 0;
  GenerationRequest request;
  RequestCallback on_done;
  std::shared_ptr<TaskCompletion> cancel;
  std::weak_ptr<SchedulerCore> scheduler;
  int64_t kv_tokens = 0;         // its charge against the KV budget, in tokens
  int64_t token_cost = 1;        // what one of its tokens costs: 1, or bytes (max_kv_bytes)
  int64_t page_tokens = 1;       // max_kv_bytes with paged caches: charges are whole pages
  int64_t admission_tokens = 0;  // what it is charged when (re)admitted
  RowHistory history;            // kGrowAndPreempt, batched mode
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

// Whether the model's caches are row caches: every bound input is declared a sequence.
// Whether the model's requests can run as the rows of one call: every persistent input a
// sequence of row caches, and no node whose result for one row depends on the others.
// DynamicQuantizeLinear takes one range over its whole input (onnxruntime's quantize_dynamic
// quantizes every activation so): rows run together would set each other's quantization, and
// a request would no longer get the tokens it gets alone.
bool HasRowCaches(const GraphProto& graph) {
  if (graph.persistent_bindings_size() == 0) return false;
  for (const auto& node : graph.node())
    if (node.op_type() == "DynamicQuantizeLinear" &&
        (node.domain().empty() || node.domain() == "ai.onnx"))
      return false;
  for (const auto& b : graph.persistent_bindings()) {
    const auto declared = std::find_if(graph.input().begin(), graph.input().end(),
                                       [&](const auto& in) { return in.name() == b.input_name(); });
    if (declared == graph.input().end() || !declared->type().has_sequence_type()) return false;
  }
  return true;
}

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
    OL_CHECK(options_.max_kv_tokens >= 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: max_kv_tokens must be >= 0, got " +
                 std::to_string(options_.max_kv_tokens));
    OL_CHECK(options_.max_kv_bytes >= 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: max_kv_bytes must be >= 0, got " +
                 std::to_string(options_.max_kv_bytes));
    OL_CHECK(options_.max_kv_tokens == 0 || options_.max_kv_bytes == 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: set max_kv_tokens or max_kv_bytes, not both (got " +
                 std::to_string(options_.max_kv_tokens) + " tokens and " +
                 std::to_string(options_.max_kv_bytes) + " bytes)");
    max_runners_ = options_.max_parallel_steps > 0 ? options_.max_parallel_steps
                                                   : AsyncRunArena().max_concurrency();
  }

  const SchedulerOptions& options() const { return options_; }

  int64_t NextId() {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_id_++;
  }

  void Enqueue(std::shared_ptr<RequestRecord> record) {
    int64_t worst_case = 0;
    try {  // a request that can never run under the budget fails at once
      SetTokenCost(*record);
      worst_case = WorstCaseKvTokens(*record);
      CheckFitsAlone(*record, worst_case);
    } catch (const Error&) {
      record->Complete(std::current_exception(), Tensor());
      return;
    }
    // Growing charges need batched mode (its caches can be dropped and recomputed).
    const bool grows = Growing() && BatchedModel(record->request);
    record->admission_tokens = grows ? PromptKvTokens(*record) : worst_case;
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(record));
    AdmitLocked();
  }

  // What one of the request's tokens costs against the budget: 1, or under max_kv_bytes its
  // model's KV bytes per token (throws when its declarations give none), charged in whole
  // pages when its caches are paged, at the page storage the context's PagedAttention
  // writes when its policy fixes it (else the declared layout).
  void SetTokenCost(RequestRecord& record) const {
    const ModelProto* model = ModelOf(record.request);
    if (options_.max_kv_bytes == 0 || model == nullptr) return;  // no model: fails when run
    const auto& storage = context_.kv_page_storage();
    const KvTokenBytes per_token = KvBytesPerToken(*model, storage ? &*storage : nullptr);
    OL_CHECK(per_token.bytes > 0, ErrorCode::kInvalidArgument,
             "RequestScheduler: request " + std::to_string(record.id) +
                 ": max_kv_bytes needs the model's KV bytes per token, but " + per_token.why_not +
                 "; use max_kv_tokens");
    record.token_cost = per_token.bytes;
    record.page_tokens = per_token.page_tokens;
    record.stats.kv_bytes_per_token = per_token.bytes;
  }

  // The token slots `rows` rows of `length` tokens take: whole pages when they are paged.
  static int64_t Slots(const RequestRecord& record, int64_t rows, int64_t length) {
    const int64_t page = record.page_tokens;
    const int64_t pages = CheckedAdd(length, page - 1, "a request's KV tokens") / page;
    return CheckedMul(rows, CheckedMul(pages, page, "a request's KV tokens"),
                      "a request's KV tokens");
  }

  // Refuses a request whose worst case alone exceeds the budget.
  void CheckFitsAlone(const RequestRecord& record, int64_t worst_case) const {
    const int64_t need = CheckedMul(worst_case, record.token_cost, "a request's KV bytes");
    if (Budget() == 0 || need <= Budget()) return;
    const bool bytes = options_.max_kv_bytes > 0;
    const std::string pages =
        record.page_tokens > 1
            ? ", in whole pages of " + std::to_string(record.page_tokens) + " tokens,"
            : "";
    const std::string per_token =
        bytes ? pages + " x " + std::to_string(record.token_cost) + " bytes per token" : "";
    Throw(ErrorCode::kResourceExhausted,
          "RequestScheduler: request " + std::to_string(record.id) + " needs " +
              std::to_string(need) + (bytes ? " KV bytes" : " KV tokens") +
              " (rows x (prompt + max_new_tokens)" + per_token + ") but " +
              (bytes ? "max_kv_bytes" : "max_kv_tokens") + " is " + std::to_string(Budget()));
  }

  // The KV budget in its unit (tokens or bytes); 0: none.
  int64_t Budget() const { return std::max(options_.max_kv_tokens, options_.max_kv_bytes); }
  // The charges of the admitted requests in the budget's unit.
  int64_t ReservedLocked() const {
    return options_.max_kv_bytes > 0 ? stats_.kv_bytes_reserved : stats_.kv_tokens_reserved;
  }

  // The request's model (its session's), or null.
  static const ModelProto* ModelOf(const GenerationRequest& request) {
    if (request.session != nullptr) return &request.session->model();
    return request.model.get();
  }

  // The request's prompt tensor; null without a valid one (it fails when it runs).
  static const Tensor* PromptOf(const GenerationRequest& request) {
    auto ids = request.feeds.find(request.options.input_ids_name);
    if (ids == request.feeds.end() || !ids->second.is_tensor() || ids->second.tensor().rank() != 2)
      return nullptr;
    return &ids->second.tensor();
  }

  // A request's worst-case cache: rows x (prompt + max_new_tokens).
  static int64_t WorstCaseKvTokens(const RequestRecord& record) {
    const Tensor* t = PromptOf(record.request);
    if (t == nullptr) return 0;
    return Slots(record, t->dim(0),
                 t->dim(1) + std::max<int64_t>(record.request.options.max_new_tokens, 0));
  }

  // The cache its prompt fills: rows x prompt.
  static int64_t PromptKvTokens(const RequestRecord& record) {
    const Tensor* t = PromptOf(record.request);
    return t == nullptr ? 0 : Slots(record, t->dim(0), t->dim(1));
  }

  // Whether the request will run in batched mode (StartGeneration decides the same way).
  bool BatchedModel(const GenerationRequest& request) const {
    const ModelProto* model = ModelOf(request);
    return options_.batch_rows && model != nullptr && HasRowCaches(model->graph());
  }

  // Whether batched requests are charged as their caches grow (kGrowAndPreempt,
  // kGrowAndRefuse) rather than their worst case.
  bool Growing() const {
    return Budget() > 0 && options_.kv_admission != KvAdmission::kReserveWorstCase;
  }

  // A queued request that is cancelled completes at once with its prompt; a preempted one
  // resumes its generation, which ends at the call it was preempted at with the tokens so far.
  void CancelQueued(const std::shared_ptr<RequestRecord>& record) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = std::find(pending_.begin(), pending_.end(), record);
      if (it == pending_.end()) return;  // running or done: the step loop sees the token
      if (record->history.parked != nullptr && !record->cancel->cancelled()) return;
      pending_.erase(it);
      if (record->history.parked != nullptr) return EndPreemptedLocked(*record);
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

  // Called by a request's Driver once it chose its mode (`chosen`), or failed before.
  void Started(bool chosen, bool batched) {
    std::lock_guard<std::mutex> lock(mutex_);
    --starting_;
    if (chosen) ++(batched ? stats_.batched_requests : stats_.per_request_requests);
    if (batched) ++batched_running_;
    MaybeStepLocked();
  }

  // Called by a request's Driver once its generation ended (the frame then frees itself).
  void Finish(std::shared_ptr<RequestRecord> record, std::exception_ptr error, Tensor tokens,
              bool batched) {
    record->Complete(error, std::move(tokens));
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    ReleaseLocked(*record);
    if (batched) --batched_running_;
    AdmitLocked();
    MaybeStepLocked();
    NotifyIfIdleLocked();
  }

  SchedulerStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    SchedulerStats s = stats_;
    const bool b = s.batched_requests > 0, p = s.per_request_requests > 0;
    s.mode = b && p ? "mixed" : b ? "batched" : p ? "per_request" : "";
    return s;
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

  // A preempted request cancelled meanwhile (taken out of the queue): its generation resumes
  // with no charge and no step, and ends at the call it was preempted at.
  void EndPreemptedLocked(RequestRecord& record) {
    PendingCall* parked = std::exchange(record.history.parked, nullptr);
    ++in_flight_;
    ++batched_running_;  // until its Finish
    MakeReadyLocked(parked->handle);
  }

  void AdmitLocked() {
    while (in_flight_ < options_.max_in_flight && !pending_.empty()) {
      // Cancelled through its own token while preempted: it ends without waiting for room.
      if (pending_.front()->history.parked != nullptr && pending_.front()->cancel->cancelled()) {
        std::shared_ptr<RequestRecord> record = std::move(pending_.front());
        pending_.pop_front();
        EndPreemptedLocked(*record);
        continue;
      }
      const int64_t kv = pending_.front()->admission_tokens;
      if (Budget() > 0 && ReservedLocked() + kv * pending_.front()->token_cost > Budget())
        return;  // the head waits until running requests free their charges
      std::shared_ptr<RequestRecord> record = std::move(pending_.front());
      pending_.pop_front();
      ChargeLocked(*record, kv);
      ++in_flight_;
      peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
      if (record->history.parked != nullptr) {
        ReadmitLocked(*record);
        continue;
      }
      ++starting_;
      // Created suspended: the body runs when a runner resumes it.
      MakeReadyLocked(Drive(this, std::move(record)).handle);
    }
  }

  // Raises the request's charge to `kv_tokens`.
  void ChargeLocked(RequestRecord& record, int64_t kv_tokens) {
    if (kv_tokens <= record.kv_tokens) return;
    AddChargeLocked(record, kv_tokens - record.kv_tokens);
  }

  // Frees the request's charge.
  void ReleaseLocked(RequestRecord& record) { AddChargeLocked(record, -record.kv_tokens); }

  void AddChargeLocked(RequestRecord& record, int64_t tokens) {
    record.kv_tokens += tokens;
    stats_.kv_tokens_reserved += tokens;
    stats_.peak_kv_tokens_reserved =
        std::max(stats_.peak_kv_tokens_reserved, stats_.kv_tokens_reserved);
    if (options_.max_kv_bytes == 0) return;
    stats_.kv_bytes_reserved += tokens * record.token_cost;
    stats_.peak_kv_bytes_reserved =
        std::max(stats_.peak_kv_bytes_reserved, stats_.kv_bytes_reserved);
  }

  // The tokens a call's request caches hold once the call ran (whole pages when paged).
  static int64_t NeedOf(const PendingCall& p) {
    const RowHistory& h = p.record->history;
    if (p.fed_ids.rank() != 2) return h.Tokens() + p.fed_ids.numel();
    const auto held = h.ids.empty() ? int64_t{0} : static_cast<int64_t>(h.ids[0].size());
    return Slots(*p.record, p.fed_ids.dim(0), held + p.fed_ids.dim(1));
  }

  // Whether the call runs in its step: neither cancelled nor refused.
  static bool Live(const PendingCall& p) {
    return p.call.error == nullptr && !p.record->cancel->cancelled();
  }

  // Growing charges: charges each live call of the step the tokens it adds to its caches;
  // while they do not fit, preempts (or refuses) the newest request of the step. The oldest
  // always fits alone (worst cases were checked at submission), so the others free enough.
  void FitStepLocked(std::vector<PendingCall*>& step) {
    for (;;) {
      int64_t growth = 0;
      PendingCall* newest = nullptr;
      for (PendingCall* p : step) {
        if (!Live(*p)) continue;  // adds nothing: it leaves the step
        growth += std::max<int64_t>(0, NeedOf(*p) - p->record->kv_tokens) * p->record->token_cost;
        if (newest == nullptr || p->record->id > newest->record->id) newest = p;
      }
      if (ReservedLocked() + growth <= Budget()) break;
      if (options_.kv_admission == KvAdmission::kGrowAndRefuse) {
        RefuseLocked(*newest);  // stays in the step: resumed with its error
      } else {
        PreemptLocked(newest);
        step.erase(std::find(step.begin(), step.end(), newest));
      }
    }
    for (PendingCall* p : step)
      if (Live(*p)) ChargeLocked(*p->record, NeedOf(*p));
  }

  // kGrowAndRefuse: the request fails with its call, naming what its step needed; its charge
  // is freed at once for the others of the step.
  void RefuseLocked(PendingCall& p) {
    RequestRecord& r = *p.record;
    const bool bytes = options_.max_kv_bytes > 0;
    const int64_t others = ReservedLocked() - r.kv_tokens * r.token_cost;
    p.call.error = std::make_exception_ptr(
        Error(ErrorCode::kResourceExhausted,
              "RequestScheduler: request " + std::to_string(r.id) +
                  " cannot grow its KV cache: its next step needs " +
                  std::to_string(NeedOf(p) * r.token_cost) + (bytes ? " KV bytes" : " KV tokens") +
                  ", the other requests hold " + std::to_string(others) + " of " +
                  (bytes ? "max_kv_bytes " : "max_kv_tokens ") + std::to_string(Budget()) +
                  " (kv_admission grow_and_refuse)"));
    ReleaseLocked(r);
  }

  // Drops the request's caches and charge and queues it first, its call parked: readmitted,
  // it recomputes what its caches held plus this call's tokens.
  void PreemptLocked(PendingCall* p) {
    RequestRecord& r = *p->record;
    r.admission_tokens = NeedOf(*p);
    ReleaseLocked(r);
    *p->call.rows = r.history.initial_rows;  // releases its pages
    r.history.parked = p;
    ++stats_.preemptions;
    ++r.stats.preemptions;
    --in_flight_;
    pending_.push_front(r.shared_from_this());
  }

  // A readmitted request's parked call feeds everything its caches held plus its own tokens
  // (the mask already covers them all) and joins the next step.
  void ReadmitLocked(RequestRecord& r) {
    PendingCall* p = std::exchange(r.history.parked, nullptr);
    RowHistory& h = r.history;
    p->fed_ids = Joined(h.ids_name, std::exchange(h.ids, {}), p->fed_ids);
    p->call.feeds[h.ids_name] = RuntimeValue(p->fed_ids);
    if (!h.positions_name.empty()) {
      p->fed_positions = Joined(h.positions_name, std::exchange(h.positions, {}), p->fed_positions);
      p->call.feeds[h.positions_name] = RuntimeValue(p->fed_positions);
    }
    waiting_.push_back(p);
    MaybeStepLocked();
  }

  // kGrowAndPreempt: the tokens of the step's calls that ran are now in their caches.
  void RecordCachedLocked(const std::vector<PendingCall*>& step) {
    for (PendingCall* p : step) {
      if (p->call.error != nullptr || p->call.outputs.empty()) continue;  // failed or skipped
      AppendRows(p->record->history.ids, p->fed_ids);
      if (!p->record->history.positions_name.empty())
        AppendRows(p->record->history.positions, p->fed_positions);
    }
  }

  void MakeReadyLocked(std::coroutine_handle<> handle) {
    ready_.push_back(handle);
    SpawnRunnerLocked();
  }

  void SpawnRunnerLocked() {
    if (runners_ < max_runners_) {
      ++runners_;
      AsyncRunArena().enqueue([self = shared_from_this()] { self->RunnerLoop(); });
    }
  }

  // One runner: runs a due batched step first, else resumes ready coroutines in FIFO order,
  // until neither is left. Each resume runs one request up to its next step gate or batched
  // call (or its end).
  void RunnerLoop() {
    for (;;) {
      std::coroutine_handle<> handle;
      std::vector<PendingCall*> step;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (step_due_) {
          step_due_ = false;
          stepping_ = true;
          step.swap(waiting_);
          if (Growing()) FitStepLocked(step);
        } else if (ready_.empty()) {
          --runners_;
          NotifyIfIdleLocked();
          return;
        } else {
          handle = ready_.front();
          ready_.pop_front();
        }
      }
      if (handle) {
        handle.resume();
      } else {
        RunBatchedStep(std::move(step));
      }
    }
  }

  // The next batched step is due once every running batched request waits for it and every
  // admitted request has started (a new one may still join it).
  void MaybeStepLocked() {
    if (stepping_ || step_due_ || starting_ > 0 || batched_running_ > 0 || waiting_.empty()) return;
    step_due_ = true;
    SpawnRunnerLocked();
  }

  // A batched request's call joins the next step (its coroutine is suspended).
  void Enlist(PendingCall* pending) {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(pending);
    --batched_running_;
    MaybeStepLocked();
  }

  // One step: every waiting call that is not cancelled, in as few model calls as possible;
  // then each request continues (sampling, callbacks) on the runners.
  void RunBatchedStep(std::vector<PendingCall*> step) {
    std::vector<RowCall*> live;
    for (PendingCall* p : step)
      if (Live(*p)) live.push_back(&p->call);
    std::vector<int64_t> sizes;
    try {
      sizes = RunRowCalls(context_, live);
    } catch (...) {  // outside any one call (memory for the batch): every call fails
      for (RowCall* call : live)
        if (call->error == nullptr && call->outputs.empty()) call->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stepping_ = false;
    RecordCallsLocked(sizes);
    if (Growing()) RecordCachedLocked(step);
    batched_running_ += static_cast<int64_t>(step.size());
    for (PendingCall* p : step) MakeReadyLocked(p->handle);
    MaybeStepLocked();  // a readmitted request may wait alone
  }

  void RecordCallsLocked(const std::vector<int64_t>& sizes) {
    for (int64_t rows : sizes) {
      ++stats_.batched_calls;
      stats_.max_batch_size = std::max(stats_.max_batch_size, rows);
      if (stats_.batch_sizes.size() == SchedulerStats::kMaxRecordedCalls)
        stats_.batch_sizes.erase(stats_.batch_sizes.begin());
      stats_.batch_sizes.push_back(rows);
    }
  }

  // Suspends a batched request's call until the step that runs it has run.
  struct Enlisted {
    SchedulerCore* core;
    PendingCall* pending;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) const {
      pending->handle = handle;
      core->Enlist(pending);
    }
    void await_resume() const noexcept {}
  };
  static Task<RuntimeValueMap> BatchedCall(SchedulerCore* core, const RuntimeSession* session,
                                           RequestRecord* record,
                                           const std::vector<std::string>* logits,
                                           RuntimeValueMap feeds,
                                           std::vector<RuntimeValueMap>* rows) {
    PendingCall pending{
        RowCall{session, std::move(feeds), rows, logits, {}, {}}, record, {}, {}, {}};
    if (core->Growing()) TrackFed(pending);
    co_await Enlisted{core, &pending};
    if (pending.call.error) std::rethrow_exception(pending.call.error);
    co_return std::move(pending.call.outputs);
  }

  // kGrowAndPreempt: the tokens the call adds to its caches (shared owners: no copy), and the
  // caches before the request's first call, which a preemption restores.
  static void TrackFed(PendingCall& pending) {
    RowHistory& h = pending.record->history;
    if (h.initial_rows.empty()) h.initial_rows = *pending.call.rows;
    pending.fed_ids = pending.call.feeds.at(h.ids_name).tensor();
    auto positions = pending.call.feeds.find(h.positions_name);
    if (positions == pending.call.feeds.end())
      h.positions_name.clear();  // the model takes none
    else
      pending.fed_positions = positions->second.tensor();
  }

  // The step runner of a batched request: each model call waits for the next step.
  StepRunner BatchedRunner(std::shared_ptr<const RuntimeSession> session, RequestRecord* record,
                           const std::string& logits_name) {
    auto logits = std::make_shared<const std::vector<std::string>>(1, logits_name);
    return [this, session = std::move(session), record, logits](
               RuntimeValueMap feeds, std::vector<RuntimeValueMap>* rows) {
      return BatchedCall(this, session.get(), record, logits.get(), std::move(feeds), rows);
    };
  }

  // The step gate: suspends the generation and queues it behind the other ready requests.
  struct Turn {
    SchedulerCore* core;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) const { core->MakeReady(handle); }
    void await_resume() const noexcept {}
  };
  static Task<void> YieldTurn(SchedulerCore* core) { co_await Turn{core}; }

  // The request's session: its own, else the cached session of its model.
  static std::shared_ptr<const RuntimeSession> SessionOf(RequestRecord* r) {
    if (r->request.session != nullptr) return std::move(r->request.session);
    OL_CHECK(r->request.model != nullptr, ErrorCode::kInvalidArgument, "generate: model is null");
    return SessionCache::Default().Get(std::move(r->request.model), r->request.session_options);
  }

  // The request's generation (not started: a Task runs when awaited) in the mode its model
  // allows (`batched`). Takes the request's inputs.
  static Task<Tensor> StartGeneration(SchedulerCore* core, RequestRecord* r, bool* batched) {
    GenerationOptions options = std::move(r->request.options);
    TokenCallback on_token = r->TakeTimedTokenCallback();
    std::shared_ptr<const RuntimeSession> session = SessionOf(r);
    *batched = core->options_.batch_rows && HasRowCaches(session->model().graph());
    r->stats.mode = *batched ? "batched" : "per_request";
    r->history.ids_name = options.input_ids_name;
    r->history.positions_name = options.position_ids_name;
    if (*batched)
      options.step_runner = core->BatchedRunner(session, r, options.logits_name);
    else
      options.step_gate = [core](int64_t) { return YieldTurn(core); };
    return GenerateTask(std::move(session), core->context(), std::move(r->request.feeds),
                        std::move(options), std::move(on_token), r->cancel.get(),
                        &r->stats.generation);
  }

  static Driver Drive(SchedulerCore* core, std::shared_ptr<RequestRecord> record) {
    RequestRecord* r = record.get();
    r->started = Clock::now();
    r->last_token = r->started;
    r->stats.queue_wait_ns = Nanos(r->started - r->submitted);
    Tensor tokens;
    std::exception_ptr error;
    bool batched = false;
    Task<Tensor> generation;
    try {
      generation = StartGeneration(core, r, &batched);
    } catch (...) {
      error = std::current_exception();
    }
    core->Started(!r->stats.mode.empty(), batched);
    if (!error) {
      try {
        tokens = co_await std::move(generation);
      } catch (...) {
        error = std::current_exception();
      }
    }
    core->Finish(std::move(record), error, std::move(tokens), batched);
  }

  RuntimeContext& context_;
  const SchedulerOptions options_;
  int64_t max_runners_ = 1;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::deque<std::shared_ptr<RequestRecord>> pending_;
  std::deque<std::coroutine_handle<>> ready_;
  std::vector<PendingCall*> waiting_;  // batched calls for the next step
  int64_t starting_ = 0;               // admitted, mode not chosen yet
  int64_t batched_running_ = 0;        // batched requests running (not waiting, not done)
  bool step_due_ = false, stepping_ = false;
  SchedulerStats stats_;
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
SchedulerStats RequestScheduler::stats() const { return core_->stats(); }

}  // namespace onnx_light::core::runtime
