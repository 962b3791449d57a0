// Parser for the ONNX textual syntax (the grammar of the onnx package's OnnxParser,
// docs/Syntax.md upstream). The result is field-for-field what onnx.parser produces for the
// same text, so models written in text can be exchanged with the onnx package as bytes.
//
// Stricter than upstream where upstream silently builds a broken proto: duplicate attributes
// or header keys, an empty operator name, out-of-range numbers and a tensor initialiser with
// no value all raise TextParseError. Also accepted beyond upstream: lists of tensors, graphs
// and types as attribute values, quoted symbolic dimensions.
#pragma once

#include <string>
#include <string_view>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

// A syntax error. Line and column (both 1-based, columns count bytes) locate the first
// character of the offending token; what() reads "line L, column C: <message>".
class TextParseError : public Error {
 public:
  TextParseError(int line, int column, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }
  // The message without the position prefix.
  const std::string& message() const { return message_; }

 private:
  int line_;
  int column_;
  std::string message_;
};

// `<header> graph function*`: the whole text must be consumed.
ModelProto ParseModel(std::string_view text);
// `name (inputs) => (outputs) <value infos and initializers> { nodes }`.
GraphProto ParseGraph(std::string_view text);
// `<header> name <attributes> (inputs) => (outputs) <value infos> { nodes }`.
FunctionProto ParseFunction(std::string_view text);
// `[label] outputs = domain.Op:overload <attributes> (inputs)`.
NodeProto ParseNode(std::string_view text);

// Name tables shared by the parser and the printer.
namespace text_syntax {
// TensorProto::DataType for "float", "int64", ...; 0 for an unknown name.
int ElementTypeFromName(std::string_view name);
// The text name of a TensorProto::DataType, or nullptr when it has none.
const char* ElementTypeName(int dtype);
// AttributeProto::AttributeType for "float", "ints", ...; 0 for an unknown name.
int AttributeTypeFromName(std::string_view name);
// The text name of an AttributeProto::AttributeType ("undefined" when it has none).
const char* AttributeTypeName(int type);
// True for the words that start a type: element types, seq, map, optional, sparse_tensor,
// opaque. A value named like one of these must be quoted.
bool IsTypeKeyword(std::string_view word);
}  // namespace text_syntax

}  // namespace onnx_light::core
