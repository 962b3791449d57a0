#include "core/runtime_value.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

RuntimeValue::RuntimeValue(Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

RuntimeValue RuntimeValue::Struct(std::string type_name, std::vector<Field> fields) {
  RuntimeValue v;
  v.kind_ = Kind::kStruct;
  v.struct_name_ = std::move(type_name);
  // Fields become a shared immutable snapshot: nobody may write through them any more.
  for (Field& f : fields)
    if (f.second.is_tensor()) f.second.tensor_.Seal();
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
    case Kind::kEmpty:
      return "empty";
    case Kind::kTensor:
      return "tensor";
    case Kind::kStruct:
      return "struct";
    case Kind::kSequence:
      return "sequence";
    case Kind::kEncoded:
      return "encoded";
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

namespace {

Tensor DeepCopyTensor(const Tensor& t, Allocator& allocator) {
  if (!t.defined()) return t;
  Tensor copy(t.name(), t.dtype(), t.shape(), allocator);
  if (t.dtype() == DataType::kString) {
    std::span<const std::string> src = t.strings();
    std::string* dst = copy.mutable_data<std::string>();
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  } else if (t.nbytes() > 0) {
    std::memcpy(copy.mutable_raw_data(), t.raw_data(), t.nbytes());
  }
  return copy;
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (!a.defined()) return true;
  if (a.dtype() == DataType::kString) {
    std::span<const std::string> x = a.strings(), y = b.strings();
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  }
  if (a.nbytes() == 0) return true;
  if (!a.contiguous() || !b.contiguous()) return SameTensor(a.Contiguous(), b.Contiguous());
  return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

template <typename Message>
bool SameMessage(const Message* a, const Message* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr) return false;
  return a->SerializeAsString() == b->SerializeAsString();
}

bool SameCatalogue(const ParameterCatalogue* a, const ParameterCatalogue* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr || a->entries.size() != b->entries.size()) return false;
  for (const auto& [name, layout] : a->entries) {
    auto it = b->entries.find(name);
    if (it == b->entries.end() || !SameMessage(layout.get(), it->second.get())) return false;
  }
  return true;
}

}  // namespace

RuntimeValue RuntimeValue::DeepCopy(Allocator& allocator) const {
  switch (kind_) {
    case Kind::kEmpty:
      return RuntimeValue();
    case Kind::kTensor:
      return RuntimeValue(DeepCopyTensor(tensor_, allocator));
    case Kind::kStruct: {
      std::vector<Field> fields;
      fields.reserve(fields_->size());
      for (const Field& f : *fields_) fields.emplace_back(f.first, f.second.DeepCopy(allocator));
      return Struct(struct_name_, std::move(fields));
    }
    case Kind::kSequence: {
      std::vector<RuntimeValue> elements = elements_.ToVector();
      for (RuntimeValue& e : elements) e = e.DeepCopy(allocator);
      return Sequence(RuntimeSequence::FromValues(std::move(elements)), elem_type_);
    }
    case Kind::kEncoded:
      return Encoded(std::make_shared<const EncodedValueProto>(*encoded_), catalogue_);
  }
  return RuntimeValue();
}

bool RuntimeValue::ContentEquals(const RuntimeValue& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kEmpty:
      return true;
    case Kind::kTensor:
      return SameTensor(tensor_, other.tensor_);
    case Kind::kStruct: {
      if (struct_name_ != other.struct_name_ || fields_->size() != other.fields_->size())
        return false;
      for (size_t i = 0; i < fields_->size(); ++i) {
        const Field& a = (*fields_)[i];
        const Field& b = (*other.fields_)[i];
        if (a.first != b.first || !a.second.ContentEquals(b.second)) return false;
      }
      return true;
    }
    case Kind::kSequence: {
      if (elements_.size() != other.elements_.size()) return false;
      if (elem_type_ && other.elem_type_ && !SameMessage(elem_type_.get(), other.elem_type_.get()))
        return false;
      if (elements_.tree_id() == other.elements_.tree_id()) return true;  // shared tree
      std::vector<RuntimeValue> a = elements_.ToVector(), b = other.elements_.ToVector();
      for (size_t i = 0; i < a.size(); ++i)
        if (!a[i].ContentEquals(b[i])) return false;
      return true;
    }
    case Kind::kEncoded:
      return SameMessage(encoded_.get(), other.encoded_.get()) &&
             SameCatalogue(catalogue_.get(), other.catalogue_.get());
  }
  return false;
}

}  // namespace onnx_light::core::runtime
