// runtime.RequestScheduler and runtime.GenerationRequest (state/request_scheduler.h).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "onnx_light.pb.h"
#include "python/bindings/convert.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"
#include "python/bindings/session.h"
#include "state/request_scheduler.h"

namespace onnx_light::python {

using core::runtime::GenerationOptions;
using core::runtime::GenerationRequest;
using core::runtime::GenerationResult;
using core::runtime::RequestHandle;
using core::runtime::RequestScheduler;
using core::runtime::RequestStats;
using core::runtime::RuntimeContext;
using core::runtime::RuntimeSessionOptions;
using core::runtime::SchedulerOptions;
using core::runtime::SchedulerStats;
using core::runtime::TaskCompletion;

namespace {

// A Python object used from worker threads: the last reference may die there, so the GIL
// is taken to release it.
std::shared_ptr<py::object> Hold(py::object obj) {
  return std::shared_ptr<py::object>(new py::object(std::move(obj)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

py::dict StatsToPython(const RequestStats& s) {
  py::dict d;
  d["id"] = s.id;
  d["tokens"] = s.tokens;
  d["queue_wait_ns"] = s.queue_wait_ns;
  d["time_to_first_token_ns"] = s.time_to_first_token_ns;
  d["token_latency_ns"] = s.token_latency_ns;
  d["total_ns"] = s.total_ns;
  d["cancelled"] = s.cancelled;
  d["preemptions"] = s.preemptions;
  d["kv_bytes_per_token"] = s.kv_bytes_per_token;
  d["mode"] = s.mode;
  d["step_ns"] = s.generation.step_ns;
  d["used_persistent_state"] = s.generation.used_persistent_state;
  return d;
}

py::dict SchedulerStatsToPython(const SchedulerStats& s) {
  py::dict d;
  d["mode"] = s.mode;
  d["batched_requests"] = s.batched_requests;
  d["per_request_requests"] = s.per_request_requests;
  d["batched_calls"] = s.batched_calls;
  d["max_batch_size"] = s.max_batch_size;
  d["batch_sizes"] = s.batch_sizes;
  d["kv_tokens_reserved"] = s.kv_tokens_reserved;
  d["peak_kv_tokens_reserved"] = s.peak_kv_tokens_reserved;
  d["kv_bytes_reserved"] = s.kv_bytes_reserved;
  d["peak_kv_bytes_reserved"] = s.peak_kv_bytes_reserved;
  d["preemptions"] = s.preemptions;
  return d;
}

// kv_admission from its Python name.
core::runtime::KvAdmission KvAdmissionFromName(const std::string& name) {
  if (name == "reserve_worst_case") return core::runtime::KvAdmission::kReserveWorstCase;
  if (name == "grow_and_preempt") return core::runtime::KvAdmission::kGrowAndPreempt;
  if (name == "grow_and_refuse") return core::runtime::KvAdmission::kGrowAndRefuse;
  throw py::value_error(
      "RequestScheduler: kv_admission must be 'reserve_worst_case', 'grow_and_preempt' or "
      "'grow_and_refuse', got '" +
      name + "'");
}

std::string KvAdmissionName(core::runtime::KvAdmission policy) {
  switch (policy) {
    case core::runtime::KvAdmission::kGrowAndPreempt:
      return "grow_and_preempt";
    case core::runtime::KvAdmission::kGrowAndRefuse:
      return "grow_and_refuse";
    case core::runtime::KvAdmission::kReserveWorstCase:
      break;
  }
  return "reserve_worst_case";
}

// Owns the native scheduler; waits for its requests with the GIL released (their callbacks
// take the GIL).
class PyScheduler {
 public:
  PyScheduler(RuntimeContext& context, SchedulerOptions options)
      : scheduler_(std::make_unique<RequestScheduler>(context, options)) {}
  ~PyScheduler() {
    py::gil_scoped_release release;
    scheduler_.reset();
  }
  RequestScheduler& get() { return *scheduler_; }

 private:
  std::unique_ptr<RequestScheduler> scheduler_;
};

GenerationResult Wait(const RequestHandle& handle) {
  py::gil_scoped_release release;
  return handle.Get();
}

}  // namespace

void RegisterScheduler(py::module_& runtime) {
  py::class_<RequestHandle>(runtime, "RequestHandle",
                            "One submitted generation request (future-like).")
      .def_property_readonly("id", &RequestHandle::id)
      .def("done", &RequestHandle::done)
      .def(
          "result", [](const RequestHandle& h) { return TensorToPython(Wait(h).tokens); },
          "Blocks until the request completes (GIL released); returns the INT64 "
          "[batch, prompt + generated] runtime tensor, or raises the request's error.")
      .def(
          "stats", [](const RequestHandle& h) { return StatsToPython(Wait(h).stats); },
          "Blocks until the request completes; returns its stats as a dict: id, tokens, "
          "queue_wait_ns, time_to_first_token_ns, token_latency_ns, total_ns, cancelled, "
          "mode ('batched' or 'per_request'), preemptions, kv_bytes_per_token (what max_kv_bytes "
          "charged one of its tokens: the declared layout, or the page storage the context's "
          "PagedAttention writes; 0 without a byte budget), step_ns, used_persistent_state. "
          "Raises the "
          "request's error.")
      .def("cancel", &RequestHandle::Cancel, py::arg("reason") = "cancelled",
           py::call_guard<py::gil_scoped_release>(),
           "Stops the request before its next token; a queued request completes at once with "
           "its prompt.")
      .def_property_readonly("completion", &RequestHandle::completion)
      .def("__repr__", [](const RequestHandle& h) {
        return "RequestHandle(id=" + std::to_string(h.id()) + (h.done() ? ", done)" : ")");
      });

  py::class_<PyScheduler>(runtime, "RequestScheduler",
                          "Runs many generation requests at once, each with its own state: "
                          "FIFO admission of at most max_in_flight requests. On a model whose "
                          "caches are row caches (paged, bound as sequences) one model call "
                          "per step runs all running requests (mode 'batched', unless "
                          "batch_rows=False); otherwise round-robin token steps between them "
                          "on the shared TBB arena (mode 'per_request').")
      .def(py::init([](RuntimeContext& context, int64_t max_in_flight, int64_t max_parallel_steps,
                       bool batch_rows, int64_t max_kv_tokens, const std::string& kv_admission,
                       int64_t max_kv_bytes) {
             return std::make_unique<PyScheduler>(
                 context,
                 SchedulerOptions{max_in_flight, max_parallel_steps, batch_rows, max_kv_tokens,
                                  max_kv_bytes, KvAdmissionFromName(kv_admission)});
           }),
           py::arg("context"), py::arg("max_in_flight") = 4, py::arg("max_parallel_steps") = 0,
           py::arg("batch_rows") = true, py::arg("max_kv_tokens") = 0,
           py::arg("kv_admission") = "reserve_worst_case", py::arg("max_kv_bytes") = 0,
           py::keep_alive<1, 2>(),
           "max_kv_tokens (0: no budget) bounds the cached tokens of the admitted requests. "
           "kv_admission='reserve_worst_case' (default): each request reserves rows x (prompt + "
           "max_new_tokens) when admitted. 'grow_and_preempt' (batched mode): a request is "
           "admitted when its prompt fits and charged its cached tokens step by step; when a "
           "step would exceed the budget the newest running request is preempted (caches "
           "released, back to the front of the queue) and, readmitted, recomputes its prompt "
           "and generated tokens and continues with no token repeated or lost. "
           "'grow_and_refuse': the same, but that request fails with MemoryError instead. "
           "Either way a "
           "request whose worst case alone exceeds the budget fails with MemoryError. "
           "max_kv_bytes (instead of max_kv_tokens) is the budget in bytes: each token costs "
           "its model's KV bytes per token, from the cache declarations, paged caches in "
           "whole pages of the PagedAttention's block_size (a model whose "
           "declarations give no size is refused with ValueError).")
      .def(
          "submit",
          [](PyScheduler& self, py::handle model_obj, const py::dict& feeds,
             std::optional<GenerationOptions> options,
             std::optional<RuntimeSessionOptions> session_options, py::object on_token,
             py::object on_done, std::shared_ptr<TaskCompletion> completion) {
            GenerationRequest request;
            // The requests of one model object share its cached session (one plan, one copy
            // of the packed weights).
            request.session = SessionFromPython(model_obj, session_options);
            for (const auto& [key, value] : feeds) {
              const std::string name = py::cast<std::string>(key);
              request.feeds.emplace(name, ValueFromPython(value, name));
            }
            request.options = options.value_or(GenerationOptions{});
            request.cancel = std::move(completion);
            if (!on_token.is_none()) {
              request.on_token = [cb = Hold(on_token)](int64_t step,
                                                       const std::vector<int64_t>& tokens) {
                py::gil_scoped_acquire gil;
                py::object keep_going = (*cb)(step, py::cast(tokens));
                return keep_going.is_none() || py::cast<bool>(keep_going);
              };
            }
            // The model is read until the request completes: writes to it fail meanwhile.
            auto reading = std::make_shared<std::optional<ModelGuard::Reading>>();
            reading->emplace(GuardFromPython(model_obj), "RequestScheduler.submit");
            std::shared_ptr<py::object> on_done_held;
            if (!on_done.is_none()) on_done_held = Hold(on_done);
            core::runtime::RequestCallback done = [cb = std::move(on_done_held), reading](
                                                      std::exception_ptr, GenerationResult) {
              reading->reset();
              if (cb == nullptr) return;
              py::gil_scoped_acquire gil;
              try {
                (*cb)();
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("RequestScheduler on_done callback");
              }
            };
            py::gil_scoped_release release;
            return self.get().Submit(std::move(request), std::move(done));
          },
          py::arg("model"), py::arg("feeds"), py::arg("options") = py::none(),
          py::arg("session_options") = py::none(), py::kw_only(), py::arg("on_token") = py::none(),
          py::arg("on_done") = py::none(), py::arg("completion") = py::none(),
          "Queues one generation (same arguments as runtime.generate) and returns a "
          "RequestHandle. on_token(step, tokens) streams this request's tokens (return False "
          "to stop); on_done() is called once it completed. Both run on a worker thread.")
      .def("wait_idle",
           [](PyScheduler& self) {
             py::gil_scoped_release release;
             self.get().WaitIdle();
           })
      .def_property_readonly("max_in_flight",
                             [](PyScheduler& self) { return self.get().options().max_in_flight; })
      .def_property_readonly("max_kv_tokens",
                             [](PyScheduler& self) { return self.get().options().max_kv_tokens; })
      .def_property_readonly("max_kv_bytes",
                             [](PyScheduler& self) { return self.get().options().max_kv_bytes; })
      .def_property_readonly(
          "kv_admission",
          [](PyScheduler& self) { return KvAdmissionName(self.get().options().kv_admission); })
      .def_property_readonly("queued", [](PyScheduler& self) { return self.get().queued(); })
      .def_property_readonly("in_flight", [](PyScheduler& self) { return self.get().in_flight(); })
      .def_property_readonly("peak_in_flight",
                             [](PyScheduler& self) { return self.get().peak_in_flight(); })
      .def(
          "stats", [](PyScheduler& self) { return SchedulerStatsToPython(self.get().stats()); },
          "What ran so far, as a dict: mode ('batched', 'per_request', 'mixed' or '' before any "
          "request started), batched_requests, per_request_requests, batched_calls, "
          "max_batch_size, batch_sizes (rows of each batched model call, the last 4096), "
          "kv_tokens_reserved, peak_kv_tokens_reserved (charged against max_kv_tokens as "
          "kv_admission says), kv_bytes_reserved, peak_kv_bytes_reserved (the same in bytes, "
          "with max_kv_bytes), preemptions (grow_and_preempt: requests preempted).");
}

}  // namespace onnx_light::python
