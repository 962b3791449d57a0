#include "core/text_parser.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "core/checked_math.h"

namespace onnx_light::core {

namespace text_syntax {
namespace {

struct NamedValue {
  const char* name;
  int value;
};

constexpr NamedValue kElementTypes[] = {
    {"float", TensorProto::FLOAT},
    {"uint8", TensorProto::UINT8},
    {"int8", TensorProto::INT8},
    {"uint16", TensorProto::UINT16},
    {"int16", TensorProto::INT16},
    {"int32", TensorProto::INT32},
    {"int64", TensorProto::INT64},
    {"string", TensorProto::STRING},
    {"bool", TensorProto::BOOL},
    {"float16", TensorProto::FLOAT16},
    {"double", TensorProto::DOUBLE},
    {"uint32", TensorProto::UINT32},
    {"uint64", TensorProto::UINT64},
    {"complex64", TensorProto::COMPLEX64},
    {"complex128", TensorProto::COMPLEX128},
    {"bfloat16", TensorProto::BFLOAT16},
    {"float8e4m3fn", TensorProto::FLOAT8E4M3FN},
    {"float8e4m3fnuz", TensorProto::FLOAT8E4M3FNUZ},
    {"float8e5m2", TensorProto::FLOAT8E5M2},
    {"float8e5m2fnuz", TensorProto::FLOAT8E5M2FNUZ},
    {"float8e8m0", TensorProto::FLOAT8E8M0},
    {"uint4", TensorProto::UINT4},
    {"int4", TensorProto::INT4},
    {"float4e2m1", TensorProto::FLOAT4E2M1},
    {"uint2", TensorProto::UINT2},
    {"int2", TensorProto::INT2},
    {"float6e2m3", TensorProto::FLOAT6E2M3},
    {"float6e3m2", TensorProto::FLOAT6E3M2},
};

constexpr NamedValue kAttributeTypes[] = {
    {"float", AttributeProto::FLOAT},
    {"int", AttributeProto::INT},
    {"string", AttributeProto::STRING},
    {"tensor", AttributeProto::TENSOR},
    {"graph", AttributeProto::GRAPH},
    {"sparse_tensor", AttributeProto::SPARSE_TENSOR},
    {"type_proto", AttributeProto::TYPE_PROTO},
    {"floats", AttributeProto::FLOATS},
    {"ints", AttributeProto::INTS},
    {"strings", AttributeProto::STRINGS},
    {"tensors", AttributeProto::TENSORS},
    {"graphs", AttributeProto::GRAPHS},
    {"sparse_tensors", AttributeProto::SPARSE_TENSORS},
    {"type_protos", AttributeProto::TYPE_PROTOS},
};

template <size_t N>
int Lookup(const NamedValue (&table)[N], std::string_view name) {
  for (const NamedValue& entry : table) {
    if (name == entry.name) return entry.value;
  }
  return 0;
}

template <size_t N>
const char* NameOf(const NamedValue (&table)[N], int value) {
  for (const NamedValue& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return nullptr;
}

}  // namespace

int ElementTypeFromName(std::string_view name) { return Lookup(kElementTypes, name); }
const char* ElementTypeName(int dtype) { return NameOf(kElementTypes, dtype); }
int AttributeTypeFromName(std::string_view name) { return Lookup(kAttributeTypes, name); }
const char* AttributeTypeName(int type) {
  const char* name = NameOf(kAttributeTypes, type);
  return name != nullptr ? name : "undefined";
}
bool IsTypeKeyword(std::string_view word) {
  return ElementTypeFromName(word) != 0 || word == "seq" || word == "map" || word == "optional" ||
         word == "sparse_tensor" || word == "opaque";
}

}  // namespace text_syntax

namespace {

std::string FormatPosition(int line, int column, const std::string& message) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
}

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdStart(char c) { return IsAlpha(c) || c == '_'; }
bool IsIdChar(char c) { return IsIdStart(c) || IsDigit(c); }
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

using AttrType = AttributeProto::AttributeType;

AttrType SingletonOf(AttrType type) {
  switch (type) {
    case AttributeProto::FLOATS:
      return AttributeProto::FLOAT;
    case AttributeProto::INTS:
      return AttributeProto::INT;
    case AttributeProto::STRINGS:
      return AttributeProto::STRING;
    case AttributeProto::TENSORS:
      return AttributeProto::TENSOR;
    case AttributeProto::GRAPHS:
      return AttributeProto::GRAPH;
    case AttributeProto::SPARSE_TENSORS:
      return AttributeProto::SPARSE_TENSOR;
    case AttributeProto::TYPE_PROTOS:
      return AttributeProto::TYPE_PROTO;
    default:
      return type;
  }
}

bool IsListType(AttrType type) { return SingletonOf(type) != type; }

struct Literal {
  enum Kind { kInt, kFloat, kString } kind = kInt;
  std::string text;  // the number without blanks, or the unescaped string
  size_t pos = 0;
};

// Recursive descent over the raw characters, like upstream: blanks and `#` comments are
// skipped before every token, and `=>` must be written without a blank inside.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  ModelProto Model() {
    ModelProto model;
    if (Accept('<')) {
      std::set<std::string> seen;
      do {
        const size_t at = SkipSpace();
        std::string key = Identifier("a model header keyword (ir_version, opset_import, ...)");
        if (!seen.insert(key).second) Fail(at, "duplicate key '" + key + "' in the model header");
        Expect(':', "after '" + key + "'");
        if (key == "ir_version") {
          model.set_ir_version(Int64());
        } else if (key == "opset_import") {
          OpsetList(model.mutable_opset_import());
        } else if (key == "producer_name") {
          model.set_producer_name(String());
        } else if (key == "producer_version") {
          model.set_producer_version(String());
        } else if (key == "domain") {
          model.set_domain(String());
        } else if (key == "model_version") {
          model.set_model_version(Int64());
        } else if (key == "doc_string") {
          model.set_doc_string(String());
        } else if (key == "metadata_props") {
          Expect('[', "to open the metadata_props list");
          if (!Accept(']')) {
            StringPairs(model.mutable_metadata_props());
            Expect(']', "to close the metadata_props list");
          }
        } else {
          Fail(at, "unknown keyword '" + key +
                       "' in the model header (expected ir_version, opset_import, "
                       "producer_name, producer_version, domain, model_version, doc_string "
                       "or metadata_props)");
        }
      } while (Accept(','));
      Expect('>', "to close the model header");
    }
    Graph(model.mutable_graph());
    while (!AtEndAfterSpace()) Function(model.add_functions());
    return model;
  }

  GraphProto WholeGraph() {
    GraphProto graph;
    Graph(&graph);
    ExpectEnd("the graph");
    return graph;
  }

  FunctionProto WholeFunction() {
    FunctionProto function;
    Function(&function);
    ExpectEnd("the function");
    return function;
  }

  NodeProto WholeNode() {
    NodeProto node;
    Node(&node);
    ExpectEnd("the node");
    return node;
  }

 private:
  // ---- Positions and errors ----

  [[noreturn]] void Fail(size_t at, const std::string& message) const {
    int line = 1;
    int column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw TextParseError(line, column, message);
  }

  // A short description of the token at `at`, for messages ("found ...").
  std::string TokenAt(size_t at) const {
    if (at >= text_.size()) return "end of input";
    const char c = text_[at];
    if (IsIdStart(c)) {
      size_t end = at;
      while (end < text_.size() && IsIdChar(text_[end])) ++end;
      return "'" + std::string(text_.substr(at, end - at)) + "'";
    }
    if (IsDigit(c) || c == '-') {
      size_t end = at + 1;
      while (end < text_.size() && (IsIdChar(text_[end]) || text_[end] == '.')) ++end;
      return "'" + std::string(text_.substr(at, end - at)) + "'";
    }
    if (c == '"') return "a string";
    return std::string("'") + c + "'";
  }

  std::string Found() { return ", found " + TokenAt(SkipSpace()); }

  // ---- Characters ----

  size_t SkipSpace() {
    while (pos_ < text_.size()) {
      if (IsSpace(text_[pos_])) {
        ++pos_;
      } else if (text_[pos_] == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
    return pos_;
  }

  // The next significant character, or 0 at the end.
  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  bool AtEndAfterSpace() { return SkipSpace() >= text_.size(); }

  bool Accept(char c) {
    if (Peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }

  void Expect(char c, const std::string& context) {
    if (!Accept(c)) Fail(pos_, std::string("expected '") + c + "' " + context + Found());
  }

  void ExpectEnd(const std::string& what) {
    if (!AtEndAfterSpace()) Fail(pos_, "unexpected " + TokenAt(pos_) + " after the end of " + what);
  }

  bool AtArrow() {
    const size_t at = SkipSpace();
    return at + 1 < text_.size() && text_[at] == '=' && text_[at + 1] == '>';
  }

  // `=>`, written without blanks between the two characters.
  void ExpectArrow(const std::string& owner) {
    const size_t at = SkipSpace();
    if (at + 1 < text_.size() && text_[at] == '=' && text_[at + 1] == '>') {
      pos_ = at + 2;
      return;
    }
    Fail(at, "expected '=>' between the inputs and outputs of " + owner + Found());
  }

  // ---- Identifiers ----

  std::string_view PeekIdentifier() {
    const size_t at = SkipSpace();
    size_t end = at;
    if (end < text_.size() && IsIdStart(text_[end])) {
      while (end < text_.size() && IsIdChar(text_[end])) ++end;
    }
    return text_.substr(at, end - at);
  }

  std::string OptionalIdentifier() {
    std::string_view id = PeekIdentifier();
    pos_ += id.size();
    return std::string(id);
  }

  std::string Identifier(const std::string& what) {
    std::string id = OptionalIdentifier();
    if (id.empty()) Fail(pos_, "expected " + what + Found());
    return id;
  }

  // An identifier or a quoted string (names that are not identifiers).
  std::string QuotableIdentifier(const std::string& what) {
    if (Peek() == '"') return StringLiteral();
    return Identifier(what);
  }

  bool NextIsType() { return text_syntax::IsTypeKeyword(PeekIdentifier()); }

  // ---- Literals ----

  std::string StringLiteral() {
    const size_t start = SkipSpace();
    ++pos_;  // opening quote
    std::string value;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      // A backslash takes the next character literally (upstream has no other escapes).
      if (text_[pos_] == '\\') ++pos_;
      if (pos_ >= text_.size()) break;
      value.push_back(text_[pos_++]);
    }
    if (pos_ >= text_.size()) Fail(start, "unterminated string literal");
    ++pos_;  // closing quote
    return value;
  }

  Literal ParseLiteral(const std::string& what) {
    Literal lit;
    lit.pos = SkipSpace();
    if (pos_ >= text_.size()) Fail(pos_, "expected " + what + Found());
    if (text_[pos_] == '"') {
      lit.kind = Literal::kString;
      lit.text = StringLiteral();
      return lit;
    }
    std::string sign;
    if (text_[pos_] == '-') {
      sign = "-";
      ++pos_;
      SkipSpace();
    }
    if (pos_ < text_.size() && IsAlpha(text_[pos_])) {
      size_t end = pos_;
      while (end < text_.size() && IsIdChar(text_[end])) ++end;
      const std::string word = ToLower(text_.substr(pos_, end - pos_));
      if (word != "inf" && word != "infinity" && word != "nan") {
        if (sign.empty()) Fail(lit.pos, "expected " + what + Found());
        Fail(lit.pos, "invalid number '-" + std::string(text_.substr(pos_, end - pos_)) + "'");
      }
      lit.kind = Literal::kFloat;
      lit.text = sign + word;
      pos_ = end;
      return lit;
    }
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
      if (sign.empty()) Fail(lit.pos, "expected " + what + Found());
      Fail(lit.pos, "expected a number after '-'" + Found());
    }
    const size_t from = pos_;
    bool is_float = false;
    while (pos_ < text_.size() && (IsDigit(text_[pos_]) || text_[pos_] == '.')) {
      if (text_[pos_] == '.') {
        if (is_float) break;
        is_float = true;
      }
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      is_float = true;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      const size_t digits = pos_;
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
      if (pos_ == digits) {
        Fail(lit.pos, "invalid number '" + sign + std::string(text_.substr(from, pos_ - from)) +
                          "': the exponent has no digits");
      }
    }
    if (pos_ < text_.size() && (IsIdChar(text_[pos_]) || text_[pos_] == '.')) {
      size_t end = pos_;
      while (end < text_.size() && (IsIdChar(text_[end]) || text_[end] == '.')) ++end;
      Fail(lit.pos, "invalid number '" + sign + std::string(text_.substr(from, end - from)) + "'");
    }
    lit.kind = is_float ? Literal::kFloat : Literal::kInt;
    lit.text = sign + std::string(text_.substr(from, pos_ - from));
    return lit;
  }

  int64_t ToInt64(const Literal& lit) const {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(lit.text.data(), lit.text.data() + lit.text.size(), value);
    if (ec != std::errc() || end != lit.text.data() + lit.text.size()) {
      Fail(lit.pos, "integer '" + lit.text + "' is out of the int64 range");
    }
    return value;
  }

  template <typename T>
  T ToFloating(const Literal& lit) const {
    T value = 0;
    auto [end, ec] = std::from_chars(lit.text.data(), lit.text.data() + lit.text.size(), value);
    if (ec != std::errc() || end != lit.text.data() + lit.text.size()) {
      Fail(lit.pos, "number '" + lit.text + "' is out of the " +
                        (sizeof(T) == 4 ? "float" : "double") + " range");
    }
    return value;
  }

  int64_t Int64() {
    Literal lit = ParseLiteral("an integer");
    if (lit.kind != Literal::kInt) Fail(lit.pos, "expected an integer, found " + TokenAt(lit.pos));
    return ToInt64(lit);
  }

  uint64_t UInt64() {
    Literal lit = ParseLiteral("an unsigned integer");
    if (lit.kind != Literal::kInt || lit.text[0] == '-') {
      Fail(lit.pos, "expected an unsigned integer, found " + TokenAt(lit.pos));
    }
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(lit.text.data(), lit.text.data() + lit.text.size(), value);
    if (ec != std::errc() || end != lit.text.data() + lit.text.size()) {
      Fail(lit.pos, "integer '" + lit.text + "' is out of the uint64 range");
    }
    return value;
  }

  template <typename T>
  T Floating() {
    Literal lit = ParseLiteral("a number");
    if (lit.kind == Literal::kString) Fail(lit.pos, "expected a number, found a string");
    return ToFloating<T>(lit);
  }

  std::string String() {
    if (Peek() != '"') Fail(pos_, "expected a quoted string" + Found());
    return StringLiteral();
  }

  // ---- Lists of pairs ----

  void OpsetList(google::protobuf::RepeatedPtrField<OperatorSetIdProto>* opsets) {
    Expect('[', "to open the opset_import list");
    if (Accept(']')) return;
    do {
      OperatorSetIdProto* opset = opsets->Add();
      if (Peek() != '"') Fail(pos_, "expected a quoted opset domain such as \"\"" + Found());
      opset->set_domain(StringLiteral());
      Expect(':', "between an opset domain and its version");
      opset->set_version(Int64());
    } while (Accept(','));
    Expect(']', "to close the opset_import list");
  }

  void StringPairs(google::protobuf::RepeatedPtrField<StringStringEntryProto>* pairs) {
    do {
      StringStringEntryProto* entry = pairs->Add();
      entry->set_key(String());
      Expect(':', "between a key and its value");
      entry->set_value(String());
    } while (Accept(','));
  }

  // ---- Types ----

  void Shape(TensorShapeProto* shape) {
    do {
      const char c = Peek();
      if (Accept('?')) {
        shape->add_dim();
      } else if (c == '"') {
        shape->add_dim()->set_dim_param(StringLiteral());
      } else if (IsIdStart(c)) {
        shape->add_dim()->set_dim_param(OptionalIdentifier());
      } else if (IsDigit(c) || c == '-') {
        shape->add_dim()->set_dim_value(Int64());
      } else {
        Fail(pos_, "expected a dimension (a number, a symbol or '?')" + Found());
      }
    } while (Accept(','));
  }

  // `float`, `float[]` (unknown rank) or `float[dims]`, after the element type name.
  void TensorShapeSuffix(TensorShapeProto* shape, bool* has_shape) {
    *has_shape = true;
    if (Accept('[')) {
      if (Accept(']')) {
        *has_shape = false;
        return;
      }
      Shape(shape);
      Expect(']', "to close the tensor shape");
    }
  }

  int32_t PrimitiveType(const std::string& context) {
    const size_t at = SkipSpace();
    std::string name = Identifier("an element type" + context);
    const int32_t dtype = text_syntax::ElementTypeFromName(name);
    if (dtype == 0) Fail(at, "unknown element type '" + name + "'" + context);
    return dtype;
  }

  void Type(TypeProto* type) {
    const size_t at = SkipSpace();
    DepthGuard guard(this, at);
    const std::string name = Identifier("a type");
    if (const int32_t dtype = text_syntax::ElementTypeFromName(name); dtype != 0) {
      auto* tensor = type->mutable_tensor_type();
      tensor->set_elem_type(dtype);
      bool has_shape = true;
      TensorShapeSuffix(tensor->mutable_shape(), &has_shape);
      if (!has_shape) tensor->clear_shape();
      return;
    }
    if (name == "seq") {
      Expect('(', "after 'seq'");
      Type(type->mutable_sequence_type()->mutable_elem_type());
      Expect(')', "to close 'seq('");
    } else if (name == "optional") {
      Expect('(', "after 'optional'");
      Type(type->mutable_optional_type()->mutable_elem_type());
      Expect(')', "to close 'optional('");
    } else if (name == "map") {
      Expect('(', "after 'map'");
      auto* map = type->mutable_map_type();
      map->set_key_type(PrimitiveType(" as the map key type"));
      Expect(',', "between the map key type and value type");
      Type(map->mutable_value_type());
      Expect(')', "to close 'map('");
    } else if (name == "sparse_tensor") {
      Expect('(', "after 'sparse_tensor'");
      auto* sparse = type->mutable_sparse_tensor_type();
      sparse->set_elem_type(PrimitiveType(" in sparse_tensor(...)"));
      bool has_shape = true;
      TensorShapeSuffix(sparse->mutable_shape(), &has_shape);
      if (!has_shape) sparse->clear_shape();
      Expect(')', "to close 'sparse_tensor('");
    } else if (name == "opaque") {
      Expect('(', "after 'opaque'");
      auto* opaque = type->mutable_opaque_type();
      if (!Accept(')')) {
        std::string first = Identifier("an opaque type name");
        while (Accept('.')) first += "." + Identifier("a name after '.'");
        if (Accept(',')) {
          opaque->set_domain(first);
          opaque->set_name(Identifier("an opaque type name"));
        } else {
          opaque->set_name(first);
        }
        Expect(')', "to close 'opaque('");
      }
    } else {
      Fail(at, "unknown type '" + name + "'");
    }
  }

  // `type? name`; a bare name followed by `[` or another name is a misspelt type.
  void ValueInfo(ValueInfoProto* info) {
    const bool typed = NextIsType();
    if (typed) Type(info->mutable_type());
    const size_t at = SkipSpace();
    info->set_name(QuotableIdentifier("a value name"));
    if (!typed && (Peek() == '[' || IsIdStart(Peek()))) {
      Fail(at, "unknown type '" + info->name() + "'");
    }
  }

  // ---- Tensors ----

  // Values of a tensor literal (`{...}`) or its external data (`[...]`), typed by `type`.
  void TensorData(TensorProto* tensor, const TypeProto& type, size_t type_pos) {
    if (!type.has_tensor_type()) Fail(type_pos, "a tensor value needs a tensor type");
    const int32_t dtype = type.tensor_type().elem_type();
    tensor->set_data_type(dtype);
    if (!type.tensor_type().has_shape()) {
      Fail(type_pos, "a tensor value needs a shape ('float[]' has unknown rank)");
    }
    int64_t count = 1;
    for (const auto& dim : type.tensor_type().shape().dim()) {
      if (!dim.has_dim_value()) {
        Fail(type_pos, "a tensor value needs numeric dimensions, not '" +
                           (dim.has_dim_param() ? dim.dim_param() : std::string("?")) + "'");
      }
      tensor->add_dims(dim.dim_value());
      count = CheckedMul(count, dim.dim_value(), "tensor value shape");
    }
    const size_t open = SkipSpace();
    if (Accept('{')) {
      int64_t values = 0;
      if (!Accept('}')) {
        do {
          TensorValue(tensor, dtype);
          ++values;
        } while (Accept(','));
        Expect('}', "to close the tensor values");
      }
      const bool complex = dtype == TensorProto::COMPLEX64 || dtype == TensorProto::COMPLEX128;
      const int64_t expected = complex ? 2 * count : count;
      if (values != expected) {
        Fail(open, "tensor '" + tensor->name() + "' has " + std::to_string(values) +
                       " values but its shape holds " + std::to_string(expected));
      }
    } else if (Accept('[')) {
      tensor->set_data_location(TensorProto::EXTERNAL);
      StringPairs(tensor->mutable_external_data());
      Expect(']', "to close the external data list");
    } else {
      Fail(open, "expected '{' with the tensor values or '[' with its external data" + Found());
    }
  }

  void TensorValue(TensorProto* tensor, int32_t dtype) {
    switch (dtype) {
      case TensorProto::INT4:
      case TensorProto::INT8:
      case TensorProto::INT16:
      case TensorProto::INT32:
      case TensorProto::UINT4:
      case TensorProto::UINT8:
      case TensorProto::UINT16:
      case TensorProto::FLOAT16:
      case TensorProto::BFLOAT16:
      case TensorProto::FLOAT8E4M3FN:
      case TensorProto::FLOAT8E4M3FNUZ:
      case TensorProto::FLOAT8E5M2:
      case TensorProto::FLOAT8E5M2FNUZ:
      case TensorProto::FLOAT8E8M0:
      case TensorProto::BOOL:
      case TensorProto::FLOAT4E2M1:
      case TensorProto::INT2:
      case TensorProto::UINT2:
      case TensorProto::FLOAT6E2M3:
      case TensorProto::FLOAT6E3M2: {
        // Upstream stores these (including the bit patterns of small floats) as int32.
        const size_t at = SkipSpace();
        const int64_t v = Int64();
        if (v > std::numeric_limits<int32_t>::max() || v < std::numeric_limits<int32_t>::min()) {
          Fail(at, "value " + std::to_string(v) + " does not fit the tensor's element type " +
                       text_syntax::ElementTypeName(dtype));
        }
        tensor->add_int32_data(static_cast<int32_t>(v));
        break;
      }
      case TensorProto::INT64:
        tensor->add_int64_data(Int64());
        break;
      case TensorProto::UINT32:
      case TensorProto::UINT64:
        tensor->add_uint64_data(UInt64());
        break;
      case TensorProto::FLOAT:
      case TensorProto::COMPLEX64:
        tensor->add_float_data(Floating<float>());
        break;
      case TensorProto::DOUBLE:
      case TensorProto::COMPLEX128:
        tensor->add_double_data(Floating<double>());
        break;
      case TensorProto::STRING:
        tensor->add_string_data(String());
        break;
      default:
        Fail(pos_, "tensor values of element type " + std::to_string(dtype) +
                       " cannot be written in text");
    }
  }

  // ---- Attributes ----

  // One value; `expected` is the declared type (UNDEFINED when none).
  // `declared` tells whether `expected` comes from an annotation or from earlier list items.
  void SingleAttributeValue(AttributeProto* attr, AttrType expected, bool declared = true) {
    const size_t at = SkipSpace();
    const char c = Peek();
    if (IsIdStart(c)) {
      const std::string word = ToLower(PeekIdentifier());
      if (NextIsType()) {
        TypeProto type;
        Type(&type);
        const char next = Peek();
        if (next == '{' || next == '=' || next == '[' || next == '"' || IsIdStart(next)) {
          attr->set_type(AttributeProto::TENSOR);
          TensorProto* tensor = attr->mutable_t();
          tensor->set_name(next == '"' ? StringLiteral() : OptionalIdentifier());
          Accept('=');
          TensorData(tensor, type, at);
        } else {
          attr->set_type(AttributeProto::TYPE_PROTO);
          *attr->mutable_tp() = std::move(type);
        }
      } else if (word == "inf" || word == "infinity" || word == "nan") {
        attr->set_type(AttributeProto::FLOAT);
        attr->set_f(ToFloating<float>(ParseLiteral("a number")));
      } else {
        attr->set_type(AttributeProto::GRAPH);
        Graph(attr->mutable_g());
      }
    } else if (Accept('@')) {
      attr->set_ref_attr_name(QuotableIdentifier("the name of a function attribute after '@'"));
      return;
    } else {
      Literal lit = ParseLiteral("an attribute value");
      switch (lit.kind) {
        case Literal::kInt:
          if (expected == AttributeProto::FLOAT) {
            attr->set_type(AttributeProto::FLOAT);
            attr->set_f(ToFloating<float>(lit));
          } else {
            attr->set_type(AttributeProto::INT);
            attr->set_i(ToInt64(lit));
          }
          break;
        case Literal::kFloat:
          attr->set_type(AttributeProto::FLOAT);
          attr->set_f(ToFloating<float>(lit));
          break;
        case Literal::kString:
          attr->set_type(AttributeProto::STRING);
          attr->set_s(lit.text);
          break;
      }
    }
    if (expected != AttributeProto::UNDEFINED && expected != attr->type()) {
      if (!declared) {
        Fail(at, "list attribute '" + attr->name() + "' mixes " +
                     text_syntax::AttributeTypeName(expected) + " and " +
                     text_syntax::AttributeTypeName(attr->type()) + " elements");
      }
      Fail(at, "attribute '" + attr->name() + "' is declared " +
                   text_syntax::AttributeTypeName(expected) + " but the value is " +
                   text_syntax::AttributeTypeName(attr->type()));
    }
  }

  // `name (: type)? = value` with the name already read.
  void Attribute(AttributeProto* attr, const std::string& name) {
    attr->set_name(name);
    if (Accept(':')) {
      const size_t at = SkipSpace();
      const std::string type_name = Identifier("an attribute type after ':'");
      const int type = text_syntax::AttributeTypeFromName(type_name);
      if (type == 0) Fail(at, "unknown attribute type '" + type_name + "'");
      attr->set_type(static_cast<AttrType>(type));
    }
    Expect('=', "after attribute name '" + name + "'");
    const size_t open = SkipSpace();
    if (!Accept('[')) {
      SingleAttributeValue(attr, attr->type());
      return;
    }
    if (Accept(']')) {
      if (attr->type() == AttributeProto::UNDEFINED) {
        Fail(open, "empty list for attribute '" + name + "' needs a type annotation such as '" +
                       name + ": ints = []'");
      }
      if (!IsListType(attr->type())) {
        Fail(open, "attribute '" + name + "' is declared " +
                       text_syntax::AttributeTypeName(attr->type()) + " but given a list");
      }
      return;
    }
    const bool declared = attr->type() != AttributeProto::UNDEFINED;
    do {
      AttributeProto item;
      item.set_name(name);
      const size_t at = SkipSpace();
      SingleAttributeValue(&item, SingletonOf(attr->type()), declared);
      if (item.has_ref_attr_name()) Fail(at, "an attribute reference cannot be a list element");
      switch (item.type()) {
        case AttributeProto::INT:
          attr->add_ints(item.i());
          attr->set_type(AttributeProto::INTS);
          break;
        case AttributeProto::FLOAT:
          attr->add_floats(item.f());
          attr->set_type(AttributeProto::FLOATS);
          break;
        case AttributeProto::STRING:
          attr->add_strings(item.s());
          attr->set_type(AttributeProto::STRINGS);
          break;
        case AttributeProto::TENSOR:
          *attr->add_tensors() = std::move(*item.mutable_t());
          attr->set_type(AttributeProto::TENSORS);
          break;
        case AttributeProto::GRAPH:
          *attr->add_graphs() = std::move(*item.mutable_g());
          attr->set_type(AttributeProto::GRAPHS);
          break;
        case AttributeProto::TYPE_PROTO:
          *attr->add_type_protos() = std::move(*item.mutable_tp());
          attr->set_type(AttributeProto::TYPE_PROTOS);
          break;
        default:
          Fail(at, "unsupported list element for attribute '" + name + "'");
      }
    } while (Accept(','));
    Expect(']', "to close the list of attribute '" + name + "'");
  }

  void AttributeList(google::protobuf::RepeatedPtrField<AttributeProto>* attrs) {
    Expect('<', "to open the attribute list");
    std::set<std::string> seen;
    do {
      const size_t at = SkipSpace();
      const std::string name = Identifier("an attribute name");
      if (!seen.insert(name).second) Fail(at, "duplicate attribute '" + name + "'");
      Attribute(attrs->Add(), name);
    } while (Accept(','));
    Expect('>', "to close the attribute list");
  }

  // ---- Nodes and graphs ----

  // Comma-separated names where an empty entry is an omitted optional value: `(a, , b)`.
  void NameList(google::protobuf::RepeatedPtrField<std::string>* names) {
    auto entry = [&](std::string* out) {
      const char c = Peek();
      if (c == '"') {
        *out = StringLiteral();
        return true;
      }
      *out = OptionalIdentifier();
      return !out->empty() || Peek() == ',';
    };
    std::string name;
    if (!entry(&name)) return;
    *names->Add() = name;
    while (Accept(',')) {
      if (!entry(&name)) break;
      *names->Add() = name;
    }
  }

  void Node(NodeProto* node) {
    if (Accept('[')) {
      node->set_name(Peek() == '"' ? StringLiteral() : OptionalIdentifier());
      Expect(']', "to close the node label");
    }
    NameList(node->mutable_output());
    Expect('=', "after the outputs of a node");
    const size_t op_at = SkipSpace();
    std::string domain;
    std::string op = OptionalIdentifier();
    if (op.empty()) Fail(op_at, "expected an operator name" + Found());
    while (Accept('.')) {
      if (!domain.empty()) domain += ".";
      domain += op;
      op = Identifier("an operator name after '.'");
    }
    node->set_domain(domain);
    node->set_op_type(op);
    if (Accept(':')) node->set_overload(Identifier("an overload name after ':'"));
    if (Peek() == '<') AttributeList(node->mutable_attribute());
    Expect('(', "to open the inputs of '" + op + "'");
    NameList(node->mutable_input());
    Expect(')', "to close the inputs of '" + op + "'");
    if (node->attribute_size() == 0 && Peek() == '<') AttributeList(node->mutable_attribute());
  }

  void NodeList(google::protobuf::RepeatedPtrField<NodeProto>* nodes, const std::string& owner) {
    Expect('{', "to open the body of " + owner);
    while (!Accept('}')) {
      if (AtEndAfterSpace()) Fail(pos_, "expected '}' to close the body of " + owner + Found());
      Node(nodes->Add());
    }
  }

  void Graph(GraphProto* graph) {
    DepthGuard guard(this, SkipSpace());
    graph->set_name(QuotableIdentifier("a graph name"));
    const std::string owner = "graph '" + graph->name() + "'";
    if (Accept('(') && !Accept(')')) {
      do {
        const size_t at = SkipSpace();
        ValueInfoProto* info = graph->add_input();
        ValueInfo(info);
        if (AtArrow()) Fail(pos_, "expected ')' to close the inputs of " + owner + ", found '=>'");
        if (Accept('=')) {
          TensorProto* init = graph->add_initializer();
          init->set_name(info->name());
          TensorData(init, info->type(), at);
        }
      } while (Accept(','));
      Expect(')', "to close the inputs of " + owner);
    }
    ExpectArrow(owner);
    Expect('(', "to open the outputs of " + owner);
    if (!Accept(')')) {
      do {
        ValueInfo(graph->add_output());
      } while (Accept(','));
      Expect(')', "to close the outputs of " + owner);
    }
    if (Accept('<') && !Accept('>')) {
      do {
        const size_t at = SkipSpace();
        ValueInfoProto info;
        ValueInfo(&info);
        if (Accept('=')) {
          TensorProto* init = graph->add_initializer();
          init->set_name(info.name());
          TensorData(init, info.type(), at);
        } else {
          *graph->add_value_info() = std::move(info);
        }
      } while (Accept(','));
      Expect('>', "to close the value infos of " + owner);
    }
    NodeList(graph->mutable_node(), owner);
  }

  // ---- Functions ----

  // `(x, float[N] y)`: names go to `names`; typed ones also to `infos`.
  void FunctionValues(google::protobuf::RepeatedPtrField<std::string>* names,
                      google::protobuf::RepeatedPtrField<ValueInfoProto>* infos,
                      const std::string& context) {
    Expect('(', "to open the " + context);
    if (Accept(')')) return;
    do {
      if (NextIsType()) {
        ValueInfoProto* info = infos->Add();
        ValueInfo(info);
        *names->Add() = info->name();
      } else {
        const size_t at = SkipSpace();
        std::string name = QuotableIdentifier("a name");
        if (Peek() == '[' || IsIdStart(Peek())) Fail(at, "unknown type '" + name + "'");
        *names->Add() = std::move(name);
      }
    } while (Accept(','));
    Expect(')', "to close the " + context);
  }

  void Function(FunctionProto* function) {
    if (Accept('<')) {
      std::set<std::string> seen;
      do {
        const size_t at = SkipSpace();
        const std::string key = Identifier("a function header keyword (domain, opset_import, ...)");
        if (!seen.insert(key).second) Fail(at, "duplicate key '" + key + "' in a function header");
        Expect(':', "after '" + key + "'");
        if (key == "domain") {
          function->set_domain(String());
        } else if (key == "opset_import") {
          OpsetList(function->mutable_opset_import());
        } else if (key == "doc_string") {
          function->set_doc_string(String());
        } else if (key == "overload") {
          function->set_overload(String());
        } else {
          Fail(at, "unknown keyword '" + key +
                       "' in a function header (expected domain, opset_import, doc_string "
                       "or overload)");
        }
      } while (Accept(','));
      Expect('>', "to close the function header");
    }
    function->set_name(QuotableIdentifier("a function name"));
    const std::string owner = "function '" + function->name() + "'";
    if (Accept('<')) {
      std::set<std::string> seen;
      do {
        const size_t at = SkipSpace();
        const std::string name = QuotableIdentifier("an attribute name");
        if (!seen.insert(name).second) Fail(at, "duplicate attribute '" + name + "'");
        const char next = Peek();
        if (next == ':' || next == '=') {
          Attribute(function->add_attribute_proto(), name);
        } else {
          function->add_attribute(name);
        }
      } while (Accept(','));
      Expect('>', "to close the attributes of " + owner);
    }
    FunctionValues(function->mutable_input(), function->mutable_value_info(), "inputs of " + owner);
    ExpectArrow(owner);
    FunctionValues(function->mutable_output(), function->mutable_value_info(),
                   "outputs of " + owner);
    if (Accept('<') && !Accept('>')) {
      do {
        ValueInfo(function->add_value_info());
      } while (Accept(','));
      Expect('>', "to close the value infos of " + owner);
    }
    NodeList(function->mutable_node(), owner);
  }

  // Bounds the recursion of nested types and subgraphs, so that hostile text cannot
  // overflow the stack.
  class DepthGuard {
   public:
    DepthGuard(Parser* parser, size_t at) : parser_(parser) {
      if (++parser_->depth_ > kMaxDepth) {
        parser_->Fail(at, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
      }
    }
    ~DepthGuard() { --parser_->depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser* parser_;
  };
  static constexpr int kMaxDepth = 100;

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

TextParseError::TextParseError(int line, int column, const std::string& message)
    : Error(ErrorCode::kInvalidModel, FormatPosition(line, column, message)),
      line_(line),
      column_(column),
      message_(message) {}

ModelProto ParseModel(std::string_view text) { return Parser(text).Model(); }
GraphProto ParseGraph(std::string_view text) { return Parser(text).WholeGraph(); }
FunctionProto ParseFunction(std::string_view text) { return Parser(text).WholeFunction(); }
NodeProto ParseNode(std::string_view text) { return Parser(text).WholeNode(); }

}  // namespace onnx_light::core
