// onnx_light::core::Error -> Python exceptions, chosen by the error code; the message is kept.
#include <cstring>

#include "core/error.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {

namespace {

// Names in a model may be invalid UTF-8: PyErr_SetString would then raise UnicodeDecodeError
// instead of the error itself, so undecodable bytes are shown as \xNN escapes.
void SetError(PyObject* type, const char* message) {
  PyObject* text = PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)),
                                        "backslashreplace");
  if (text == nullptr) {
    PyErr_Clear();
    PyErr_SetString(type, "(undecodable error message)");
    return;
  }
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

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
        case core::ErrorCode::kResourceExhausted:
          type = PyExc_MemoryError;
          break;
        case core::ErrorCode::kFailedPrecondition:
        case core::ErrorCode::kRuntime:
          type = PyExc_RuntimeError;
          break;
      }
      SetError(type, e.what());
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
            {"resource_exhausted", core::ErrorCode::kResourceExhausted},
        };
        for (const auto& [name, value] : kCodes) {
          if (code == name) core::Throw(value, message);
        }
        throw py::value_error("unknown error code name " + code);
      },
      py::arg("code"), py::arg("message"));
}

}  // namespace onnx_light::python
