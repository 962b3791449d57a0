// onnx_light::core::Error -> Python exceptions, chosen by the error code; the message is kept.
#include "core/error.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {

void RegisterErrors(py::module_& m) {
  // Deliberately leaked: exception types live as long as the interpreter.
  static PyObject* cancelled = nullptr;
  py::module_ runtime = m.attr("runtime");
  cancelled = PyErr_NewExceptionWithDoc("onnx_light.onnx_py._onnxpykernels.runtime.CancelledError",
                                        "A call was cancelled through its TaskCompletion.",
                                        PyExc_RuntimeError, nullptr);
  if (cancelled == nullptr) throw py::error_already_set();
  runtime.attr("CancelledError") = py::handle(cancelled);
  // Raised by the text parser (parser.cc), with .line and .column attributes.
  PyObject* parse_error = PyErr_NewExceptionWithDoc(
      "onnx_light.onnx_py._onnxpykernels.ParseError",
      "Malformed ONNX text; .line and .column (1-based) locate the offending token.",
      PyExc_ValueError, nullptr);
  if (parse_error == nullptr) throw py::error_already_set();
  m.attr("ParseError") = py::handle(parse_error);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.code()) {
        case core::ErrorCode::kInvalidArgument:
        case core::ErrorCode::kInvalidModel:
          type = PyExc_ValueError;
          break;
        case core::ErrorCode::kTypeError:
          type = PyExc_TypeError;
          break;
        case core::ErrorCode::kNotImplemented:
          type = PyExc_NotImplementedError;
          break;
        case core::ErrorCode::kCancelled:
          type = cancelled;
          break;
        case core::ErrorCode::kFailedPrecondition:
        case core::ErrorCode::kRuntime:
          type = PyExc_RuntimeError;
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });

  // Raises each kind of error, for the binding tests of the mapping.
  m.def(
      "_raise_error",
      [](const std::string& code, const std::string& message) {
        static const std::pair<const char*, core::ErrorCode> kCodes[] = {
            {"invalid_argument", core::ErrorCode::kInvalidArgument},
            {"type_error", core::ErrorCode::kTypeError},
            {"invalid_model", core::ErrorCode::kInvalidModel},
            {"not_implemented", core::ErrorCode::kNotImplemented},
            {"failed_precondition", core::ErrorCode::kFailedPrecondition},
            {"cancelled", core::ErrorCode::kCancelled},
            {"runtime", core::ErrorCode::kRuntime},
        };
        for (const auto& [name, value] : kCodes) {
          if (code == name) core::Throw(value, message);
        }
        throw py::value_error("unknown error code name " + code);
      },
      py::arg("code"), py::arg("message"));
}

}  // namespace onnx_light::python
