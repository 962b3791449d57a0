// runtime.TaskCompletion and runtime.PersistentValueState.
#include <memory>
#include <string>

#include "python/bindings/registration.h"
#include "state/task_completion.h"

namespace onnx_light::python {

using core::runtime::TaskCompletion;

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
          "state", [](const TaskCompletion& c) {
            return std::string(core::runtime::TaskCompletionStateName(c.state()));
          })
      .def("__repr__", [](const TaskCompletion& c) {
        return std::string("TaskCompletion(") +
               core::runtime::TaskCompletionStateName(c.state()) + ")";
      });
}

}  // namespace onnx_light::python
