#include "core/text_printer.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/standard_onnx.h"
#include "core/text_parser.h"

namespace onnx_light::core {
namespace {

bool IsIdentifier(std::string_view s) {
  if (s.empty()) return false;
  auto start = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!start(s[0])) return false;
  for (char c : s) {
    if (!start(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

// The parser takes a backslash as "next character literally", so only these two need it.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// A value, graph or attribute name: bare when it cannot be mistaken for anything else.
std::string Name(std::string_view s) {
  if (IsIdentifier(s) && !text_syntax::IsTypeKeyword(s)) return std::string(s);
  return Quote(s);
}

template <typename T>
std::string Number(T value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  (void)ec;  // the buffer is large enough for any float, double or 64-bit integer
  return std::string(buffer, end);
}

// Shortest text that reads back to the same bits, and always reads back as a float.
template <typename T>
std::string Floating(T value) {
  std::string text = Number(value);
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

std::string ElementType(int32_t dtype, const std::string& context) {
  const char* name = text_syntax::ElementTypeName(dtype);
  if (name == nullptr) {
    Throw(ErrorCode::kNotImplemented,
          "element type " + std::to_string(dtype) + " of " + context + " has no text form");
  }
  return name;
}

std::string Dims(const TensorShapeProto& shape) {
  if (shape.dim_size() == 0) return "";
  std::string out = "[";
  for (int i = 0; i < shape.dim_size(); ++i) {
    const auto& dim = shape.dim(i);
    if (i > 0) out += ", ";
    if (dim.has_dim_value()) {
      out += Number(dim.dim_value());
    } else if (dim.has_dim_param()) {
      out += Name(dim.dim_param());
    } else {
      out += "?";
    }
  }
  return out + "]";
}

std::string Type(const TypeProto& type, const std::string& context) {
  switch (type.value_case()) {
    case TypeProto::kTensorType: {
      const auto& tensor = type.tensor_type();
      return ElementType(tensor.elem_type(), context) +
             (tensor.has_shape() ? Dims(tensor.shape()) : "[]");
    }
    case TypeProto::kSparseTensorType: {
      const auto& sparse = type.sparse_tensor_type();
      return "sparse_tensor(" + ElementType(sparse.elem_type(), context) +
             (sparse.has_shape() ? Dims(sparse.shape()) : "[]") + ")";
    }
    case TypeProto::kSequenceType:
      return "seq(" + Type(type.sequence_type().elem_type(), context) + ")";
    case TypeProto::kOptionalType:
      return "optional(" + Type(type.optional_type().elem_type(), context) + ")";
    case TypeProto::kMapType:
      return "map(" + ElementType(type.map_type().key_type(), context) + ", " +
             Type(type.map_type().value_type(), context) + ")";
    case TypeProto::kOpaqueType: {
      const auto& opaque = type.opaque_type();
      if (opaque.domain().empty()) return "opaque(" + opaque.name() + ")";
      return "opaque(" + opaque.domain() + ", " + opaque.name() + ")";
    }
    default:
      Throw(ErrorCode::kNotImplemented, "the type of " + context + " has no text form");
  }
}

std::string ValueInfo(const ValueInfoProto& info) {
  if (!info.has_type()) return Name(info.name());
  return Type(info.type(), "'" + info.name() + "'") + " " + Name(info.name());
}

int64_t ElementCount(const TensorProto& tensor) {
  return CheckedNumel(std::span(tensor.dims().data(), static_cast<size_t>(tensor.dims_size())),
                      "tensor '" + tensor.name() + "'");
}

template <typename T>
T ReadRaw(const std::string& raw, int64_t index) {
  T value;
  std::memcpy(&value, raw.data() + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}

// Values of a tensor stored in raw_data, in the form the parser reads back (small floats as
// their bit patterns, sub-byte integers unpacked, like the typed int32_data field).
std::vector<std::string> RawValues(const TensorProto& tensor) {
  const std::string& raw = tensor.raw_data();
  const int64_t count = ElementCount(tensor);
  const std::string context = "tensor '" + tensor.name() + "'";
  auto need = [&](int64_t bytes) {
    if (static_cast<int64_t>(raw.size()) < bytes) {
      Throw(ErrorCode::kInvalidModel, context + " has " + std::to_string(raw.size()) +
                                          " bytes of raw data, needs " + std::to_string(bytes));
    }
  };
  std::vector<std::string> out;
  auto fixed = [&](auto tag, auto to_text) {
    using T = decltype(tag);
    need(CheckedMul(count, static_cast<int64_t>(sizeof(T)), context));
    for (int64_t i = 0; i < count; ++i) out.push_back(to_text(ReadRaw<T>(raw, i)));
  };
  auto integer = [](auto v) { return Number(static_cast<int64_t>(v)); };
  auto packed = [&](int bits, bool is_signed) {
    const int per_byte = 8 / bits;
    need((count + per_byte - 1) / per_byte);
    for (int64_t i = 0; i < count; ++i) {
      const auto byte = static_cast<uint8_t>(raw[i / per_byte]);
      int value = (byte >> ((i % per_byte) * bits)) & ((1 << bits) - 1);
      if (is_signed && (value & (1 << (bits - 1)))) value -= 1 << bits;
      out.push_back(Number(value));
    }
  };
  switch (tensor.data_type()) {
    case TensorProto::FLOAT:
      fixed(float{}, [](float v) { return Floating(v); });
      break;
    case TensorProto::DOUBLE:
      fixed(double{}, [](double v) { return Floating(v); });
      break;
    case TensorProto::COMPLEX64:
      need(CheckedMul(count, 8, context));
      for (int64_t i = 0; i < 2 * count; ++i) out.push_back(Floating(ReadRaw<float>(raw, i)));
      break;
    case TensorProto::COMPLEX128:
      need(CheckedMul(count, 16, context));
      for (int64_t i = 0; i < 2 * count; ++i) out.push_back(Floating(ReadRaw<double>(raw, i)));
      break;
    case TensorProto::INT8:
      fixed(int8_t{}, integer);
      break;
    case TensorProto::INT16:
      fixed(int16_t{}, integer);
      break;
    case TensorProto::INT32:
      fixed(int32_t{}, integer);
      break;
    case TensorProto::INT64:
      fixed(int64_t{}, integer);
      break;
    case TensorProto::UINT8:
    case TensorProto::BOOL:
    case TensorProto::FLOAT8E4M3FN:
    case TensorProto::FLOAT8E4M3FNUZ:
    case TensorProto::FLOAT8E5M2:
    case TensorProto::FLOAT8E5M2FNUZ:
    case TensorProto::FLOAT8E8M0:
      fixed(uint8_t{}, integer);
      break;
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      fixed(uint16_t{}, integer);
      break;
    case TensorProto::UINT32:
      fixed(uint32_t{}, integer);
      break;
    case TensorProto::UINT64:
      fixed(uint64_t{}, [](uint64_t v) { return Number(v); });
      break;
    case TensorProto::INT4:
      packed(4, true);
      break;
    case TensorProto::UINT4:
    case TensorProto::FLOAT4E2M1:
      packed(4, false);
      break;
    case TensorProto::INT2:
      packed(2, true);
      break;
    case TensorProto::UINT2:
      packed(2, false);
      break;
    default:
      Throw(ErrorCode::kNotImplemented, "raw data of " + context + " (element type " +
                                            std::to_string(tensor.data_type()) +
                                            ") has no text form");
  }
  return out;
}

std::vector<std::string> TypedValues(const TensorProto& tensor) {
  std::vector<std::string> out;
  for (int32_t v : tensor.int32_data()) out.push_back(Number(v));
  for (int64_t v : tensor.int64_data()) out.push_back(Number(v));
  for (uint64_t v : tensor.uint64_data()) out.push_back(Number(v));
  for (float v : tensor.float_data()) out.push_back(Floating(v));
  for (double v : tensor.double_data()) out.push_back(Floating(v));
  for (const std::string& v : tensor.string_data()) out.push_back(Quote(v));
  return out;
}

// `{v, ...}` or `["location": "...", ...]`.
std::string TensorData(const TensorProto& tensor) {
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    std::string out = "[";
    for (int i = 0; i < tensor.external_data_size(); ++i) {
      if (i > 0) out += ", ";
      out += Quote(tensor.external_data(i).key()) + ": " + Quote(tensor.external_data(i).value());
    }
    return out + "]";
  }
  const std::vector<std::string> values =
      tensor.has_raw_data() ? RawValues(tensor) : TypedValues(tensor);
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += values[i];
  }
  return out + "}";
}

std::string TensorType(const TensorProto& tensor) {
  std::string out = ElementType(tensor.data_type(), "tensor '" + tensor.name() + "'");
  if (tensor.dims_size() == 0) return out;
  out += "[";
  for (int i = 0; i < tensor.dims_size(); ++i) {
    if (i > 0) out += ", ";
    out += Number(tensor.dims(i));
  }
  return out + "]";
}

// A tensor written as an attribute value: `float[2] {1.0, 2.0}`, `float[2] w {...}`.
std::string TensorLiteral(const TensorProto& tensor) {
  std::string out = TensorType(tensor);
  if (!tensor.name().empty()) out += " " + Name(tensor.name());
  if (tensor.data_location() == TensorProto::EXTERNAL) out += " =";
  return out + " " + TensorData(tensor);
}

std::string Indent(int level) { return std::string(2 * static_cast<size_t>(level), ' '); }

constexpr size_t kLineWidth = 100;

// `open item, item close` on one line when `prefix` plus that fits the line width, else one
// item per line indented under `level`, with `close` back at `level`.
std::string Wrapped(const std::string& prefix, const std::vector<std::string>& items, char open,
                    char close, int level) {
  std::string line(1, open);
  for (size_t i = 0; i < items.size(); ++i) line += (i > 0 ? ", " : "") + items[i];
  line += close;
  const size_t last_line = prefix.size() - std::min(prefix.size(), prefix.rfind('\n') + 1);
  const bool multiline_item = line.find('\n') != std::string::npos;
  if (multiline_item || last_line + line.size() <= kLineWidth) return prefix + line;
  std::string out = prefix + open + "\n";
  for (size_t i = 0; i < items.size(); ++i) {
    out += Indent(level + 1) + items[i] + (i + 1 < items.size() ? ",\n" : "\n");
  }
  return out + Indent(level) + close;
}

std::string Graph(const GraphProto& graph, int level);

bool NeedsAnnotation(const AttributeProto& attr) {
  if (attr.has_ref_attr_name()) return attr.has_type();
  switch (attr.type()) {
    case AttributeProto::FLOATS:
      return attr.floats_size() == 0;
    case AttributeProto::INTS:
      return attr.ints_size() == 0;
    case AttributeProto::STRINGS:
      return attr.strings_size() == 0;
    case AttributeProto::TENSORS:
      return attr.tensors_size() == 0;
    case AttributeProto::GRAPHS:
      return attr.graphs_size() == 0;
    case AttributeProto::TYPE_PROTOS:
      return attr.type_protos_size() == 0;
    default:
      return false;
  }
}

template <typename List, typename ToText>
std::string ListText(const List& list, ToText to_text) {
  std::string out = "[";
  bool first = true;
  for (const auto& item : list) {
    if (!first) out += ", ";
    first = false;
    out += to_text(item);
  }
  return out + "]";
}

std::string AttributeValue(const AttributeProto& attr, int level) {
  const std::string context = "attribute '" + attr.name() + "'";
  if (attr.has_ref_attr_name()) return "@" + Name(attr.ref_attr_name());
  auto type_text = [&](const TypeProto& t) { return Type(t, context); };
  auto graph_text = [&](const GraphProto& g) { return Graph(g, level); };
  switch (attr.type()) {
    case AttributeProto::FLOAT:
      return Floating(attr.f());
    case AttributeProto::INT:
      return Number(attr.i());
    case AttributeProto::STRING:
      return Quote(attr.s());
    case AttributeProto::TENSOR:
      return TensorLiteral(attr.t());
    case AttributeProto::GRAPH:
      return Graph(attr.g(), level);
    case AttributeProto::TYPE_PROTO:
      return Type(attr.tp(), context);
    case AttributeProto::FLOATS:
      return ListText(attr.floats(), [](float v) { return Floating(v); });
    case AttributeProto::INTS:
      return ListText(attr.ints(), [](int64_t v) { return Number(v); });
    case AttributeProto::STRINGS:
      return ListText(attr.strings(), Quote);
    case AttributeProto::TENSORS:
      return ListText(attr.tensors(), TensorLiteral);
    case AttributeProto::GRAPHS:
      return ListText(attr.graphs(), graph_text);
    case AttributeProto::TYPE_PROTOS:
      return ListText(attr.type_protos(), type_text);
    case AttributeProto::SPARSE_TENSOR:
    case AttributeProto::SPARSE_TENSORS:
      Throw(ErrorCode::kNotImplemented, "sparse tensor " + context + " has no text form");
    default:
      Throw(ErrorCode::kInvalidModel, context + " has no type");
  }
}

// `name = value`, or `name: type = value` where the value alone would not say the type.
std::string Attribute(const AttributeProto& attr, int level, bool annotate) {
  std::string out = attr.name();
  if (annotate || NeedsAnnotation(attr)) {
    out += std::string(": ") + text_syntax::AttributeTypeName(attr.type());
  }
  return out + " = " + AttributeValue(attr, level);
}

std::string NameList(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::string out;
  for (int i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    out += Name(names.Get(i));
  }
  return out;
}

std::string Node(const NodeProto& node, int level) {
  std::string out = Indent(level);
  if (node.has_name()) out += "[" + Name(node.name()) + "] ";
  out += NameList(node.output()) + " = ";
  if (!node.domain().empty()) out += node.domain() + ".";
  out += node.op_type();
  if (node.has_overload()) out += ":" + node.overload();
  std::vector<std::string> attrs;
  bool has_graph = false;
  for (const AttributeProto& attr : node.attribute()) {
    has_graph |= attr.type() == AttributeProto::GRAPH || attr.type() == AttributeProto::GRAPHS;
    attrs.push_back(Attribute(attr, level, false));
  }
  const std::string inputs = "(" + NameList(node.input()) + ")";
  if (attrs.empty()) return out + inputs;
  // Subgraph bodies read better after the inputs; the parser takes both orders.
  if (has_graph) return Wrapped(out + " " + inputs + " ", attrs, '<', '>', level);
  return Wrapped(out + " ", attrs, '<', '>', level) + " " + inputs;
}

std::string Body(const google::protobuf::RepeatedPtrField<NodeProto>& nodes, int level) {
  std::string out = "{\n";
  for (const NodeProto& node : nodes) out += Node(node, level + 1) + "\n";
  return out + Indent(level) + "}";
}

std::string Graph(const GraphProto& graph, int level) {
  std::vector<std::string> inputs;
  for (const ValueInfoProto& info : graph.input()) inputs.push_back(ValueInfo(info));
  std::vector<std::string> outputs;
  for (const ValueInfoProto& info : graph.output()) outputs.push_back(ValueInfo(info));
  std::string out = Wrapped(Name(graph.name()) + " ", inputs, '(', ')', level);
  out = Wrapped(out + " => ", outputs, '(', ')', level);
  if (graph.sparse_initializer_size() > 0) {
    Throw(ErrorCode::kNotImplemented,
          "sparse initializers of graph '" + graph.name() + "' have no text form");
  }
  std::vector<std::string> infos;
  for (const ValueInfoProto& info : graph.value_info()) infos.push_back(ValueInfo(info));
  for (const TensorProto& init : graph.initializer()) {
    infos.push_back(TensorType(init) + " " + Name(init.name()) + " = " + TensorData(init));
  }
  if (!infos.empty()) out = Wrapped(out + " ", infos, '<', '>', level);
  return out + " " + Body(graph.node(), level);
}

std::string Opsets(const google::protobuf::RepeatedPtrField<OperatorSetIdProto>& opsets) {
  return ListText(opsets, [](const OperatorSetIdProto& opset) {
    return Quote(opset.domain()) + " : " + Number(opset.version());
  });
}

std::string Header(const std::vector<std::string>& fields) {
  if (fields.empty()) return "";
  return Wrapped("", fields, '<', '>', 0) + "\n";
}

std::string Function(const FunctionProto& function) {
  std::vector<std::string> fields;
  if (function.has_domain()) fields.push_back("domain: " + Quote(function.domain()));
  if (function.opset_import_size() > 0) {
    fields.push_back("opset_import: " + Opsets(function.opset_import()));
  }
  if (function.has_doc_string()) fields.push_back("doc_string: " + Quote(function.doc_string()));
  if (function.has_overload()) fields.push_back("overload: " + Quote(function.overload()));
  std::string out = Header(fields) + Name(function.name());
  if (function.attribute_size() + function.attribute_proto_size() > 0) {
    std::string attrs = NameList(function.attribute());
    for (const AttributeProto& attr : function.attribute_proto()) {
      if (!attrs.empty()) attrs += ", ";
      attrs += Attribute(attr, 0, true);  // a default's declared type matters
    }
    out += " <" + attrs + ">";
  }
  out += " (" + NameList(function.input()) + ") => (" + NameList(function.output()) + ")";
  if (function.value_info_size() > 0) {
    std::vector<std::string> infos;
    for (const ValueInfoProto& info : function.value_info()) infos.push_back(ValueInfo(info));
    out = Wrapped(out + " ", infos, '<', '>', 0);
  }
  return out + " " + Body(function.node(), 0);
}

}  // namespace

// The text format has no syntax for the onnx-light extensions: refuse rather than drop them.
constexpr const char* kTextTarget = "ONNX text export";

std::string PrintModel(const ModelProto& model) {
  CheckNoExtensions(model, kTextTarget);
  std::vector<std::string> fields;
  if (model.has_ir_version()) fields.push_back("ir_version: " + Number(model.ir_version()));
  if (model.opset_import_size() > 0) {
    fields.push_back("opset_import: " + Opsets(model.opset_import()));
  }
  if (model.has_producer_name()) {
    fields.push_back("producer_name: " + Quote(model.producer_name()));
  }
  if (model.has_producer_version()) {
    fields.push_back("producer_version: " + Quote(model.producer_version()));
  }
  if (model.has_domain()) fields.push_back("domain: " + Quote(model.domain()));
  if (model.has_model_version()) {
    fields.push_back("model_version: " + Number(model.model_version()));
  }
  if (model.has_doc_string()) fields.push_back("doc_string: " + Quote(model.doc_string()));
  if (model.metadata_props_size() > 0) {
    fields.push_back("metadata_props: " +
                     ListText(model.metadata_props(), [](const StringStringEntryProto& e) {
                       return Quote(e.key()) + ": " + Quote(e.value());
                     }));
  }
  std::string out = Header(fields) + Graph(model.graph(), 0) + "\n";
  for (const FunctionProto& function : model.functions()) out += "\n" + Function(function) + "\n";
  return out;
}

std::string PrintGraph(const GraphProto& graph) {
  CheckNoExtensions(graph, kTextTarget);
  return Graph(graph, 0) + "\n";
}

std::string PrintFunction(const FunctionProto& function) {
  CheckNoExtensions(function, kTextTarget);
  return Function(function) + "\n";
}

std::string PrintNode(const NodeProto& node) {
  CheckNoExtensions(node, kTextTarget);
  return Node(node, 0);
}

}  // namespace onnx_light::core
