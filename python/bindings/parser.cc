// The ONNX text format: core/text_parser.h and core/text_printer.h for Python. Parse results
// are new message trees handed to Python without a copy; syntax errors raise ParseError (a
// ValueError) carrying .line and .column.
#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/text_parser.h"
#include "core/text_printer.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {
namespace {

std::string TextArgument(py::handle text) {
  if (PyBytes_Check(text.ptr())) return text.cast<std::string>();
  if (!PyUnicode_Check(text.ptr())) {
    core::Throw(core::ErrorCode::kTypeError,
                "expected the ONNX text as str or bytes, got " +
                    py::str(py::type::handle_of(text).attr("__name__")).cast<std::string>());
  }
  return text.cast<std::string>();
}

template <typename T, T (*Parse)(std::string_view)>
py::object ParseTo(py::handle text) {
  const std::string source = TextArgument(text);
  return MessageToPython(std::make_shared<T>(Parse(source)));
}

// The descriptor name of one of our messages or of an `onnx` package message.
std::string MessageName(py::handle obj) {
  if (py::isinstance<MessageRef>(obj)) return obj.cast<const MessageRef&>().descriptor()->name();
  if (py::hasattr(obj, "DESCRIPTOR")) return py::str(obj.attr("DESCRIPTOR").attr("name"));
  return "";
}

}  // namespace

namespace {

// The text of `proto` (a model, graph, function or node).
std::string PrintProto(py::handle proto) {
  const std::string name = MessageName(proto);
  if (name == "ModelProto") return core::PrintModel(*ProtoFromPython<ModelProto>(proto, "proto"));
  if (name == "GraphProto") return core::PrintGraph(*ProtoFromPython<GraphProto>(proto, "proto"));
  if (name == "FunctionProto") {
    return core::PrintFunction(*ProtoFromPython<FunctionProto>(proto, "proto"));
  }
  if (name == "NodeProto") return core::PrintNode(*ProtoFromPython<NodeProto>(proto, "proto"));
  core::Throw(core::ErrorCode::kTypeError,
              "to_text expects a ModelProto, GraphProto, FunctionProto or NodeProto, got " +
                  py::str(py::type::handle_of(proto).attr("__name__")).cast<std::string>());
}

// Names and strings in a model need not be valid UTF-8 (protobuf does not check proto2
// strings): a ValueError locating the bad bytes instead of pybind11's UnicodeDecodeError.
py::str TextToPython(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), nullptr);
  if (s != nullptr) return py::reinterpret_steal<py::str>(s);
  py::error_already_set decode_error;  // takes the UnicodeDecodeError
  const auto bad = decode_error.value().attr("start").cast<size_t>();
  const size_t newline = text.rfind('\n', bad);
  const size_t from = newline == std::string::npos ? 0 : newline + 1;
  const size_t to = std::min(text.size(), bad + 40);
  py::str context = py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(
      text.data() + from, static_cast<Py_ssize_t>(to - from), "backslashreplace"));
  throw py::value_error("to_text: a name or string of the message is not valid UTF-8 (byte " +
                        std::to_string(bad) + "): " + context.cast<std::string>());
}

}  // namespace

void RegisterParser(py::module_& m) {
  // Created by RegisterErrors; deliberately leaked with the module's lifetime.
  static PyObject* parse_error = py::object(m.attr("ParseError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::TextParseError& e) {
      py::object error = py::handle(parse_error)(e.what());
      error.attr("line") = e.line();
      error.attr("column") = e.column();
      error.attr("message") = e.message();
      PyErr_SetObject(parse_error, error.ptr());
    }
  });

  py::module_ parser = m.def_submodule("parser", "ONNX text format: parse and print");
  parser.def("parse_model", &ParseTo<ModelProto, &core::ParseModel>, py::arg("text"),
             "Parses `<header> graph function*` into a ModelProto.");
  parser.def("parse_graph", &ParseTo<GraphProto, &core::ParseGraph>, py::arg("text"),
             "Parses `name (inputs) => (outputs) { nodes }` into a GraphProto.");
  parser.def("parse_function", &ParseTo<FunctionProto, &core::ParseFunction>, py::arg("text"),
             "Parses `<header> name <attributes> (inputs) => (outputs) { nodes }`.");
  parser.def("parse_node", &ParseTo<NodeProto, &core::ParseNode>, py::arg("text"),
             "Parses `outputs = domain.Op <attributes> (inputs)` into a NodeProto.");
  parser.def(
      "to_text", [](py::handle proto) { return TextToPython(PrintProto(proto)); }, py::arg("proto"),
      "The ONNX text of a model, graph, function or node.");
}

}  // namespace onnx_light::python
