// runtime.RuntimeSession as the other binding files see it, and the one place that decides
// which session a Python model runs on.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>

#include "executor/runtime_session.h"
#include "python/bindings/proto_wrapper.h"

namespace onnx_light::python {

namespace py = pybind11;

// The Python runtime.RuntimeSession: a compiled model, shareable by many states and runs.
struct PySession {
  std::shared_ptr<const core::runtime::RuntimeSession> session;
  py::object model;  // the Python object it was built from (kept alive; None when unknown)
  ModelGuard guard;  // refuses runs after `model` was edited (proto_wrapper.h)
};

// The guard of the session SessionFromPython(model, ...) gives: a RuntimeSession's own, or
// the model object's write version now (call with the GIL held).
ModelGuard GuardFromPython(py::handle model);

// The session `model` runs on (call with the GIL held):
//  - a runtime.RuntimeSession: that session (`options` must then be None);
//  - one of our ModelProto objects: the cached session of that object
//    (core::runtime::SessionCache::Default(), keyed by the object and its write version, so a
//    model changed from Python is compiled again) with `options`;
//  - bytes or an `onnx` ModelProto: a private session of a parsed copy (nothing to key it by).
std::shared_ptr<const core::runtime::RuntimeSession> SessionFromPython(
    py::handle model, const std::optional<core::runtime::RuntimeSessionOptions>& options);

// RuntimeSessionOptions(profile=True)'s totals as {'runs', 'nodes': [...]}, and the
// profile itself; both raise ValueError for a session built without profiling.
py::dict ProfileToPython(const core::runtime::RuntimeSession& session);
core::runtime::NodeProfile& ProfilerOf(const core::runtime::RuntimeSession& session);

// A Python callable that may be dropped from any thread: released with the GIL held.
std::shared_ptr<py::object> SharedCallable(py::object fn);

}  // namespace onnx_light::python
