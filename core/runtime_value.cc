#include "core/runtime_value.h"

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

RuntimeValue::RuntimeValue(Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

RuntimeValue RuntimeValue::Struct(std::string type_name, std::vector<Field> fields) {
  RuntimeValue v;
  v.kind_ = Kind::kStruct;
  v.struct_name_ = std::move(type_name);
  v.fields_ = std::make_shared<const std::vector<Field>>(std::move(fields));
  return v;
}

RuntimeValue RuntimeValue::Sequence(RuntimeSequence elements,
                                    std::shared_ptr<const TypeProto> elem_type) {
  RuntimeValue v;
  v.kind_ = Kind::kSequence;
  v.elements_ = std::move(elements);
  v.elem_type_ = std::move(elem_type);
  return v;
}

RuntimeValue RuntimeValue::Encoded(std::shared_ptr<const EncodedValueProto> encoded,
                                   std::shared_ptr<const ParameterCatalogue> catalogue) {
  OL_CHECK(encoded != nullptr, ErrorCode::kInvalidArgument, "null encoded value");
  RuntimeValue v;
  v.kind_ = Kind::kEncoded;
  v.encoded_ = std::move(encoded);
  v.catalogue_ = std::move(catalogue);
  return v;
}

const char* RuntimeValue::KindName(Kind kind) {
  switch (kind) {
    case Kind::kEmpty: return "empty";
    case Kind::kTensor: return "tensor";
    case Kind::kStruct: return "struct";
    case Kind::kSequence: return "sequence";
    case Kind::kEncoded: return "encoded";
  }
  return "?";
}

namespace {
[[noreturn]] void WrongKind(RuntimeValue::Kind want, RuntimeValue::Kind have) {
  Throw(ErrorCode::kTypeError, std::string("expected a ") + RuntimeValue::KindName(want) +
                                   " value, got " + RuntimeValue::KindName(have));
}
}  // namespace

const Tensor& RuntimeValue::tensor() const {
  if (kind_ != Kind::kTensor) WrongKind(Kind::kTensor, kind_);
  return tensor_;
}
Tensor& RuntimeValue::mutable_tensor() {
  if (kind_ != Kind::kTensor) WrongKind(Kind::kTensor, kind_);
  return tensor_;
}
Tensor RuntimeValue::TakeTensor() && {
  if (kind_ != Kind::kTensor) WrongKind(Kind::kTensor, kind_);
  return std::move(tensor_);
}

const std::string& RuntimeValue::struct_name() const {
  if (kind_ != Kind::kStruct) WrongKind(Kind::kStruct, kind_);
  return struct_name_;
}
const std::vector<RuntimeValue::Field>& RuntimeValue::fields() const {
  if (kind_ != Kind::kStruct) WrongKind(Kind::kStruct, kind_);
  return *fields_;
}
const RuntimeValue* RuntimeValue::FindField(const std::string& name) const {
  for (const auto& f : fields())
    if (f.first == name) return &f.second;
  return nullptr;
}
const RuntimeValue& RuntimeValue::field(const std::string& name) const {
  const RuntimeValue* v = FindField(name);
  OL_CHECK(v != nullptr, ErrorCode::kInvalidArgument,
           "struct '" + struct_name_ + "' has no field '" + name + "'");
  return *v;
}

const RuntimeSequence& RuntimeValue::elements() const {
  if (kind_ != Kind::kSequence) WrongKind(Kind::kSequence, kind_);
  return elements_;
}
RuntimeSequence& RuntimeValue::mutable_elements() {
  if (kind_ != Kind::kSequence) WrongKind(Kind::kSequence, kind_);
  return elements_;
}

const EncodedValueProto& RuntimeValue::encoded() const {
  if (kind_ != Kind::kEncoded) WrongKind(Kind::kEncoded, kind_);
  return *encoded_;
}

RuntimeValue RuntimeValue::BorrowView() const {
  RuntimeValue v(*this);
  if (kind_ == Kind::kTensor) v.tensor_ = tensor_.BorrowView();
  return v;  // struct fields / sequence elements are shared immutable snapshots
}

}  // namespace onnx_light::core::runtime
