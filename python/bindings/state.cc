// runtime.TaskCompletion and runtime.PersistentValueState.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "python/bindings/convert.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"
#include "python/bindings/session.h"
#include "python/bindings/state_convert.h"
#include "state/persistent_value_state.h"
#include "state/task_completion.h"

namespace onnx_light::python {

using core::runtime::PersistentValueState;
using core::runtime::RuntimeContext;
using core::runtime::RuntimeSessionOptions;
using core::runtime::RuntimeValueMap;
using core::runtime::TaskCompletion;

namespace {

// The Python object: the native state, the model object it was built from, the session
// object when built on one, and every context it ran with (kept alive so cached kernel and
// allocator references stay valid).
class PyState {
 public:
  // `model` is a model (a private session is built with `options`) or a
  // runtime.RuntimeSession (shared; its own options apply).
  PyState(py::object model, py::object initial, py::object options)
      : session_object_(py::isinstance<PySession>(model) ? model : py::none()),
        model_object_(session_object_.is_none() ? model : model.cast<const PySession&>().model),
        guard_(GuardFromPython(model)),
        model_(session_object_.is_none() ? ProtoFromPython<ModelProto>(model, "model")
                                         : model.cast<const PySession&>().session->model_ptr()),
        converter_(model_) {
    guard_.Check("PersistentValueState");
    if (!session_object_.is_none()) {
      if (!options.is_none())
        throw py::value_error(
            "PersistentValueState: options cannot be given with a RuntimeSession (the "
            "session's own options apply; build the session with the options you need)");
      std::shared_ptr<const core::runtime::RuntimeSession> session =
          session_object_.cast<const PySession&>().session;
      RuntimeValueMap values = ConvertInitial(initial);
      py::gil_scoped_release release;
      state_ = std::make_unique<PersistentValueState>(std::move(session), std::move(values));
      return;
    }
    RuntimeSessionOptions session_options;
    if (!options.is_none())
      session_options = CastArgument<RuntimeSessionOptions>(options, "options",
                                                            "a runtime.RuntimeSessionOptions");
    RuntimeValueMap values = ConvertInitial(initial);
    py::gil_scoped_release release;
    state_ = std::make_unique<PersistentValueState>(model_, std::move(values), session_options);
  }

  py::dict Run(py::object context_object, py::object feeds, py::object completion_object,
               py::object output_names, bool last_position_only) {
    RuntimeContext& context =
        CastArgument<RuntimeContext&>(context_object, "context", "a runtime.RuntimeContext");
    std::shared_ptr<TaskCompletion> completion;
    if (!completion_object.is_none())
      completion = CastArgument<std::shared_ptr<TaskCompletion>>(
          completion_object, "completion", "a runtime.TaskCompletion or None");
    std::optional<std::vector<std::string>> names;
    if (!output_names.is_none()) {
      if (py::isinstance<py::str>(output_names))
        throw py::type_error("output_names must be a list of output names, not a string");
      names = CastArgument<std::vector<std::string>>(output_names, "output_names", "a list of str");
    }
    if (last_position_only && !names)
      throw py::value_error(
          "last_position_only needs output_names: the outputs wanted at the "
          "last position");
    WarnOfAliasCopies();
    RuntimeValueMap values = converter_.MapFromPython(
        feeds, "feeds", [&](const std::string& n) { return DeclaredInput(n); });
    bool known = false;
    for (const auto& c : contexts_) known |= c.is(context_object);
    if (!known) contexts_.push_back(context_object);
    RuntimeValueMap outputs;
    {
      ModelGuard::Reading reading(guard_, "PersistentValueState.run");
      py::gil_scoped_release release;
      outputs = names ? State().Run(context, std::move(values), *names, last_position_only,
                                    completion.get())
                      : State().Run(context, std::move(values), completion.get());
    }
    return ToDict(outputs);
  }

  // The session the state runs on (the shared one it was built on, or its private one).
  py::object Session() const {
    if (!session_object_.is_none()) {
      State().session();  // raises after close
      return session_object_;
    }
    return py::cast(
        std::make_shared<PySession>(PySession{State().session(), model_object_, guard_}));
  }

  void Reset(py::object initial) {
    RuntimeValueMap values = ConvertInitial(initial);
    ModelGuard::Reading reading(guard_, "PersistentValueState.reset");
    py::gil_scoped_release release;
    State().Reset(std::move(values));
  }

  void Close() {
    if (state_ == nullptr) return;
    {
      py::gil_scoped_release release;
      state_->Close();
    }
    contexts_.clear();
  }

  py::dict Values() const { return ToDict(State().Values()); }
  bool closed() const { return state_ == nullptr || state_->closed(); }
  py::object model() const {
    State().model();  // raises after close
    return model_object_;
  }

 private:
  PersistentValueState& State() const {
    if (state_ == nullptr)
      core::Throw(core::ErrorCode::kFailedPrecondition, "PersistentValueState: not initialized");
    return *state_;
  }
  const TypeProto* DeclaredInput(const std::string& name) const {
    for (const auto& in : model_->graph().input())
      if (in.name() == name) return in.has_type() ? &in.type() : nullptr;
    return nullptr;
  }
  RuntimeValueMap ConvertInitial(py::object initial) const {
    return converter_.MapFromPython(initial, "initial",
                                    [&](const std::string& n) { return DeclaredInput(n); });
  }
  // Once per state, before a run (a warnings filter that raises then loses nothing): the
  // previous call copied caches that had room to grow in place, because the caller still held
  // outputs of an earlier call (the usual `out = state.run(...)` loop returns every output).
  void WarnOfAliasCopies() {
    const std::vector<std::string>& copied = State().last_run_alias_copies();
    if (warned_alias_copies_ || copied.empty()) return;
    warned_alias_copies_ = true;
    std::string names = "'" + copied[0] + "'";
    if (copied.size() > 1) names += " and " + std::to_string(copied.size() - 1) + " more";
    const std::string message =
        "PersistentValueState.run: the previous call copied the cache " + names +
        " into a new buffer instead of appending in place, because a value returned by an "
        "earlier call (or taken from state.values) still referenced it. Every such call copies "
        "the whole cache: pass output_names with only the outputs you read (e.g. "
        "output_names=['logits']), or drop the earlier outputs before the next call.";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) != 0) throw py::error_already_set();
  }

  static py::dict ToDict(const RuntimeValueMap& values) {
    py::dict d;
    for (const auto& [name, value] : values) d[py::str(name)] = ValueToPython(value);
    return d;
  }

  py::object session_object_;  // the runtime.RuntimeSession built on, or None
  py::object model_object_;
  ModelGuard guard_;  // refuses runs after the model was edited (proto_wrapper.h)
  std::shared_ptr<const ModelProto> model_;
  StateConverter converter_;
  std::unique_ptr<PersistentValueState> state_;
  std::vector<py::object> contexts_;
  bool warned_alias_copies_ = false;
};

}  // namespace

// Needs session.cc's types (RuntimeContext, RuntimeSessionOptions): module.cc registers that
// file first.
void RegisterState(py::module_& runtime) {
  py::class_<TaskCompletion, std::shared_ptr<TaskCompletion>>(
      runtime, "TaskCompletion",
      "Single-use cancellation token of one PersistentValueState.run call. cancel() may be "
      "called from any thread; a cancelled call never publishes its results.")
      .def(py::init<>())
      .def("cancel", &TaskCompletion::Cancel, py::arg("reason") = "cancelled",
           py::call_guard<py::gil_scoped_release>(),
           "Cancels the pending call. Raises once the call's results were published.")
      .def_property_readonly("cancelled", &TaskCompletion::cancelled)
      .def_property_readonly("done", &TaskCompletion::done)
      .def_property_readonly("reason", &TaskCompletion::reason)
      .def_property_readonly(
          "state",
          [](const TaskCompletion& c) {
            return std::string(core::runtime::TaskCompletionStateName(c.state()));
          })
      .def("__repr__", [](const TaskCompletion& c) {
        return std::string("TaskCompletion(") + core::runtime::TaskCompletionStateName(c.state()) +
               ")";
      });

  py::class_<PyState>(runtime, "PersistentValueState",
                      "One request's feedback state: outputs named by "
                      "model.graph.persistent_bindings feed their inputs on the next run.")
      .def(py::init<py::object, py::object, py::object>(), py::arg("model"),
           py::arg("initial") = py::none(), py::arg("options") = py::none(),
           "PersistentValueState(model, initial, options=None) builds a private session; "
           "PersistentValueState(session, initial) shares a runtime.RuntimeSession (compiled "
           "once: the state then holds only its retained values).")
      .def("run", &PyState::Run, py::arg("context"), py::arg("feeds") = py::none(),
           py::arg("completion") = py::none(), py::arg("output_names") = py::none(),
           py::arg("last_position_only") = false,
           "Runs one call; returns every graph output by name, or only those named in "
           "output_names (bound outputs are retained and published either way). With "
           "last_position_only, the named outputs are wanted at the last position only: one "
           "produced directly by a MatMul (an LM head's logits) comes back as [..., 1, N], "
           "computed for the last row alone. The GIL is released.")
      .def_property_readonly("session", &PyState::Session,
                             "The runtime.RuntimeSession the state runs on.")
      .def("reset", &PyState::Reset, py::arg("initial") = py::none())
      .def("close", &PyState::Close)
      .def_property_readonly("values", &PyState::Values,
                             "The retained values: shared read-only views.")
      .def_property_readonly("closed", &PyState::closed)
      .def_property_readonly("model", &PyState::model);
}

}  // namespace onnx_light::python
