// PersistentValueState: one request's feedback state (spec "Persistent input/output
// feedback", "Lifecycle and validation"). The graph declares whole input <- whole output
// bindings (GraphProto.persistent_bindings); each Run feeds the retained values to the bound
// inputs, runs the model through the ordinary RuntimeSession plan, validates the bound
// outputs against their declarations and publishes them together in one owner swap.
//
// Who owns what: the RuntimeSession owns everything that depends only on the model (plan,
// kernels, folded constants, packed weights, the arena) and the bindings resolved and
// validated once per session. A state built on a shared session holds only its retained
// values, their append capacity, a reusable frame per plan and each run's leases, so
// building one costs next to nothing and many states (requests) share one compiled model.
// The model constructors build a private session for the state.
//
// Ownership: retained values are owner handles. Retention, forwarding into the next call,
// publication, Values(), Reset and Close share or drop owners; no payload byte is copied.
// Retained tensors are sealed (read only); callers and kernels must not write a payload
// that is shared or retained.
//
// Atomicity: anything that throws before the swap (a kernel error, an invalid output, a
// cancellation that wins the TaskCompletion race) leaves the previous state intact.
//
// Threading: Run, Reset and Close on one state must not overlap; an overlap is detected and
// raises kFailedPrecondition. Values() may be read from any thread. Independent states are
// independent. The model is never serialized, cloned or hashed.
//
// Append capacity (state/persistent_tensor.h): each run hands one AppendLease per tensor
// binding to the run's child context (never to function or subgraph contexts); a kernel
// that directly consumes and produces the bound pair may append in place. Certified
// capacity is retained with the published value only when the run returned the kernel's
// committed candidate unchanged.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "state/task_completion.h"
#include "state/value_validation.h"

namespace onnx_light {
class ModelProto;
class TypeProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

class PersistentValueState {
 public:
  struct Binding {
    std::string input_name;
    std::string output_name;
    const TypeProto* input_type = nullptr;   // the graph input's declaration
    const TypeProto* output_type = nullptr;  // the graph output's declaration
  };

  // The model must outlive the state (and any returned views of its initializer storage).
  // Builds a private session with `options`.
  PersistentValueState(const ModelProto& model, RuntimeValueMap initial,
                       RuntimeSessionOptions options = {});
  // Keeps the model alive, also inside returned initializer views. Builds a private session.
  PersistentValueState(std::shared_ptr<const ModelProto> model, RuntimeValueMap initial,
                       RuntimeSessionOptions options = {});
  // On a shared session (its options apply, e.g. persistent_tensor_initial_capacity). Keeps
  // the session, hence the model, alive. The bindings are validated once per session.
  PersistentValueState(std::shared_ptr<const RuntimeSession> session, RuntimeValueMap initial);
  ~PersistentValueState();
  PersistentValueState(const PersistentValueState&) = delete;
  PersistentValueState& operator=(const PersistentValueState&) = delete;

  // One call: `feeds` supplies every non-persistent input (never a bound one). Returns all
  // graph outputs by name. `completion` (optional, single use) can cancel the call from
  // another thread; a cancelled or failed call publishes nothing.
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      TaskCompletion* completion = nullptr);
  // The same call returning only the graph outputs named in `output_names` (ORT's
  // run(output_names, ...)); every bound output is still validated, retained and published.
  // An output not asked for is not handed to the caller, so the caller cannot keep it alive
  // (a retained cache then stays appendable in place). Unknown names throw kInvalidArgument,
  // naming them, before anything runs.
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      const std::vector<std::string>& output_names,
                      TaskCompletion* completion = nullptr);
  // The same, with the named outputs wanted at the last position only (a generation loop's
  // logits): a node that produces one directly and can (the MatMul of an LM head) computes
  // only the last row along axis -2, so it comes back with that axis of length 1. Bound
  // outputs are always computed whole.
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      const std::vector<std::string>& output_names, bool last_position_only,
                      TaskCompletion* completion = nullptr);
  // Run for asio services: `co_await state.AsyncRun(context, feeds, asio::use_awaitable)`,
  // callbacks or asio::use_future; completes with void(std::exception_ptr, RuntimeValueMap).
  // Defined in state/async_state.h (include it to use this; asio stays out of this header).
  template <typename CompletionToken>
  auto AsyncRun(RuntimeContext& context, RuntimeValueMap feeds, CompletionToken&& token,
                TaskCompletion* completion = nullptr);
  // Replaces the retained values (omitted bound inputs: paged-cache defaults).
  void Reset(RuntimeValueMap initial);
  // Releases the retained values, the session (hence, unless shared, the plan and the
  // model). Later calls raise.
  void Close();

  // The retained values by bound input name: shared read-only views.
  RuntimeValueMap Values() const;
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  const ModelProto& model() const;  // throws kFailedPrecondition after Close
  const std::shared_ptr<const ModelProto>& model_ptr() const;
  const std::shared_ptr<const RuntimeSession>& session() const;  // throws after Close
  const RuntimeSessionOptions& options() const { return options_; }
  const std::vector<Binding>& bindings() const;  // empty after Close
  const ValueValidator& validator() const;
  // Graph input names that must come from current feeds (no default, not bound).
  std::vector<std::string> feed_names() const;
  // How many distinct caller contexts the state keeps alive.
  size_t retained_context_count() const;
  // Input names of the bindings whose append in the last Run copied the cache into a new
  // buffer only because something outside the state (an earlier call's returned output, a
  // Values() view) still referenced it: it had the capacity to append in place. Empty when
  // every append reused its buffer or none was attempted. Read between calls.
  const std::vector<std::string>& last_run_alias_copies() const { return last_alias_copies_; }

  // The plan's input/output index of every binding, in bindings() order.
  struct BoundSlots {
    std::vector<int> input_index;
    std::vector<int> output_index;
  };

 private:
  struct Retained;
  struct PlanState;
  struct Declarations;
  class CallGuard;

  static std::shared_ptr<const Declarations> Resolve(const RuntimeSession& session);
  RuntimeValueMap RunSelected(RuntimeContext& context, RuntimeValueMap feeds,
                              const std::vector<std::string>* output_names,
                              TaskCompletion* completion, bool last_position_only);
  std::shared_ptr<const Retained> BuildRetained(RuntimeValueMap initial) const;
  // The paged_cache_initializer named `input_name` as a runtime value, or an empty value.
  RuntimeValue PagedCacheDefault(const std::string& input_name) const;
  PlanState& PlanFor(RuntimeContext& context);
  void KeepContext(const RuntimeContext& context);
  void Publish(std::shared_ptr<const Retained> next);
  void EnsureOpen(const char* operation) const;

  std::shared_ptr<const RuntimeSession> session_;
  std::shared_ptr<const ModelProto> model_;           // the session's
  RuntimeSessionOptions options_;                     // the session's
  std::shared_ptr<const Declarations> declarations_;  // shared by every state of the session

  std::vector<std::string> last_alias_copies_;  // see last_run_alias_copies()
  mutable std::mutex retained_mutex_;           // guards only the retained_ handle swap/read
  std::shared_ptr<const Retained> retained_;

  std::atomic<bool> busy_{false};
  std::atomic<bool> closed_{false};
  std::vector<std::unique_ptr<PlanState>> plans_;      // guarded by busy_
  std::vector<std::shared_ptr<const void>> contexts_;  // caller configurations kept alive
  std::vector<const void*> context_ids_;
};

}  // namespace onnx_light::core::runtime
