#include "state/value_validation.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/affine_encoding.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/paged_cache.h"
#include "core/type_compat.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {
namespace {

constexpr size_t kMemoPruneSize = 256;  // drop expired memo entries beyond this many trees

std::string Where(const std::string& path) { return "persistent value '" + path + "'"; }

[[noreturn]] void Fail(ErrorCode code, const std::string& path, const std::string& message) {
  Throw(code, Where(path) + ": " + message);
}

void BindSymbol(const std::string& path, SymbolBindings& symbols, const std::string& symbol,
                int64_t size) {
  auto [it, inserted] = symbols.emplace(symbol, size);
  if (!inserted && it->second != size)
    Fail(ErrorCode::kInvalidArgument, path,
         "dimension '" + symbol + "' is " + std::to_string(size) + " here but " +
             std::to_string(it->second) + " elsewhere in the same value");
}

void MergeSymbols(const std::string& path, SymbolBindings& into, const SymbolBindings& from) {
  for (const auto& [symbol, size] : from) BindSymbol(path, into, symbol, size);
}

// Checks concrete `dims` against a declared shape (absent shape: any rank).
void CheckShape(const std::string& path, const Shape& dims, const TypeProto::Tensor& declared,
                SymbolBindings& symbols) {
  if (!declared.has_shape()) return;
  const auto& shape = declared.shape();
  if (static_cast<int>(dims.size()) != shape.dim_size())
    Fail(ErrorCode::kInvalidArgument, path,
         "rank " + std::to_string(dims.size()) + " (shape " + ShapeToString(dims) +
             ") does not match the declared shape " + DimsString(shape));
  for (int i = 0; i < shape.dim_size(); ++i) {
    const auto& d = shape.dim(i);
    const int64_t actual = dims[static_cast<size_t>(i)];
    if (d.has_dim_value() && d.dim_value() != actual)
      Fail(ErrorCode::kInvalidArgument, path,
           "shape " + ShapeToString(dims) + " does not match the declared shape " +
               DimsString(shape) + " at axis " + std::to_string(i));
    if (!d.has_dim_value() && !d.dim_param().empty())
      BindSymbol(path, symbols, d.dim_param(), actual);
  }
}

bool TypesEqual(const TypeProto& a, const TypeProto& b);

bool ShapesEqual(const TypeProto::Tensor& a, const TypeProto::Tensor& b) {
  if (a.has_shape() != b.has_shape()) return false;
  if (!a.has_shape()) return true;
  if (a.shape().dim_size() != b.shape().dim_size()) return false;
  for (int i = 0; i < a.shape().dim_size(); ++i) {
    const auto& x = a.shape().dim(i);
    const auto& y = b.shape().dim(i);
    if (x.has_dim_value() != y.has_dim_value()) return false;
    if (x.has_dim_value() ? x.dim_value() != y.dim_value() : x.dim_param() != y.dim_param())
      return false;
  }
  return true;
}

bool FieldsEqual(const StructTypeProto& a, const StructTypeProto& b) {
  if (a.field_size() != b.field_size()) return false;
  for (int i = 0; i < a.field_size(); ++i)
    if (a.field(i).name() != b.field(i).name() || !TypesEqual(a.field(i).type(), b.field(i).type()))
      return false;
  return true;
}

bool TypesEqual(const TypeProto& a, const TypeProto& b) {
  if (a.value_case() != b.value_case()) return false;
  switch (a.value_case()) {
    case TypeProto::kTensorType:
      return a.tensor_type().elem_type() == b.tensor_type().elem_type() &&
             ShapesEqual(a.tensor_type(), b.tensor_type());
    case TypeProto::kSequenceType:
      return TypesEqual(a.sequence_type().elem_type(), b.sequence_type().elem_type());
    case TypeProto::kStructType:
      return a.struct_type().type_ref() == b.struct_type().type_ref() &&
             FieldsEqual(a.struct_type(), b.struct_type());
    default:
      return false;  // unsupported kinds never compare equal for persistent values
  }
}

// The bytes one field of a fixed-layout structured encoding takes: a concrete, non-string
// tensor (the layout is positional, so every size must be known without the payload).
size_t FixedFieldBytes(const std::string& field_path, const TypeProto& type) {
  if (!type.has_tensor_type())
    Fail(ErrorCode::kInvalidArgument, field_path,
         "fixed-layout structured encodings hold only tensor fields");
  const auto& t = type.tensor_type();
  const auto dtype = static_cast<DataType>(t.elem_type());
  if (dtype == DataType::kString)
    Fail(ErrorCode::kInvalidArgument, field_path, "string tensors cannot be persistent");
  if (!t.has_shape())
    Fail(ErrorCode::kInvalidArgument, field_path, "structured encoding field has no rank");
  int64_t n = 1;
  for (const auto& d : t.shape().dim()) {
    if (!d.has_dim_value())
      Fail(ErrorCode::kInvalidArgument, field_path,
           "structured encoding field shape " + DimsString(t.shape()) + " is not concrete");
    n = CheckedMul(n, d.dim_value(), "structured encoding field");
  }
  return StorageBytes(dtype, n);
}

// A structured payload is its fields' bytes back to back: its size must be their sum.
void CheckStructuredPayload(const std::string& path, const StructTypeProto& s,
                            size_t payload_bytes) {
  if (s.field_size() == 0)
    Fail(ErrorCode::kInvalidArgument, path, "structured encoding declares no fields");
  size_t bytes = 0;
  for (const auto& f : s.field())
    bytes = static_cast<size_t>(
        CheckedAdd(static_cast<int64_t>(bytes),
                   static_cast<int64_t>(FixedFieldBytes(path + "." + f.name(), f.type())),
                   "structured encoding payload"));
  if (bytes != payload_bytes)
    Fail(ErrorCode::kInvalidArgument, path,
         "structured encoding payload has " + std::to_string(payload_bytes) +
             " bytes but its fields need " + std::to_string(bytes));
}

}  // namespace

ValueValidator::ValueValidator(const ModelProto& model) : model_(model) {}

size_t ValueValidator::memo_size() const {
  std::lock_guard<std::mutex> lock(memo_mutex_);
  size_t live = 0;
  for (const auto& [id, entries] : memo_)
    for (const auto& e : entries) live += e.tree.expired() ? 0 : 1;
  return live;
}

const StructTypeProto& ValueValidator::ResolveStruct(const std::string& path,
                                                     const StructTypeProto& type) const {
  // The one resolver; the message (an allocation) is built only when it fails.
  if (const StructTypeProto* found = core::FindStruct(type, &model_)) return *found;
  return core::ResolveStruct(type, &model_, Where(path));
}

void ValueValidator::ValidatePersistent(const std::string& key, const RuntimeValue& value,
                                        const TypeProto& declared) const {
  SymbolBindings symbols;
  CheckValue(key, value, declared, symbols, false);
}

void ValueValidator::CheckValue(const std::string& path, const RuntimeValue& value,
                                const TypeProto& declared, SymbolBindings& symbols,
                                bool paged_field) const {
  if (value.empty()) Fail(ErrorCode::kInvalidArgument, path, "has no value");
  switch (declared.value_case()) {
    case TypeProto::kTensorType:
      if (value.is_tensor())
        return CheckTensor(path, value.tensor(), declared, symbols, paged_field);
      if (value.is_encoded()) return CheckEncoded(path, value, declared, symbols);
      break;
    case TypeProto::kStructType:
      if (value.is_struct()) return CheckStruct(path, value, declared, symbols);
      if (value.is_encoded()) return CheckEncoded(path, value, declared, symbols);
      break;
    case TypeProto::kSequenceType:
      if (value.is_sequence()) return CheckSequence(path, value, declared, symbols);
      break;
    case TypeProto::kMapType:
    case TypeProto::kOptionalType:
    case TypeProto::kSparseTensorType:
    case TypeProto::kOpaqueType:
      Fail(ErrorCode::kNotImplemented, path,
           std::string(core::TypeKindName(declared)) + " state is not supported");
    case TypeProto::VALUE_NOT_SET:
      Fail(ErrorCode::kInvalidModel, path, "declaration has no type");
  }
  Fail(ErrorCode::kInvalidArgument, path,
       "declared as a " + std::string(core::TypeKindName(declared)) + " but got a " +
           RuntimeValue::KindName(value.kind()) + " value");
}

void ValueValidator::CheckTensor(const std::string& path, const Tensor& tensor,
                                 const TypeProto& declared, SymbolBindings& symbols,
                                 bool paged_field) const {
  if (!tensor.defined()) Fail(ErrorCode::kInvalidArgument, path, "tensor is undefined");
  if (tensor.dtype() == DataType::kString)
    Fail(ErrorCode::kInvalidArgument, path, "string tensors cannot be persistent");
  if (!tensor.has_owner())
    Fail(ErrorCode::kInvalidArgument, path,
         "tensor storage has no owner and cannot be retained (it would have to be copied)");
  const auto& t = declared.tensor_type();
  const auto want = static_cast<DataType>(t.elem_type());
  // Paged pages declared FLOAT may be stored as FLOAT16/BFLOAT16 (physical alternatives).
  const bool half_page =
      paged_field && want == DataType::kFloat &&
      (tensor.dtype() == DataType::kFloat16 || tensor.dtype() == DataType::kBFloat16);
  if (t.elem_type() != 0 && want != tensor.dtype() && !half_page)
    Fail(ErrorCode::kInvalidArgument, path,
         "element type " + DataTypeName(tensor.dtype()) + " does not match the declared " +
             DataTypeName(want));
  CheckShape(path, tensor.shape(), t, symbols);
}

void ValueValidator::CheckEncodedPayload(const std::string& path, const RuntimeValue& value) const {
  const EncodedValueProto& e = value.encoded();
  if (e.external_data_size() > 0 || e.data_location() == TensorProto::EXTERNAL)
    Fail(ErrorCode::kInvalidArgument, path,
         "encoded payload is stored externally; load external data first");
  switch (e.layout_case()) {
    case EncodedValueProto::kAffine:
      ResolveAffineEncoding(Where(path), value);
      return;
    case EncodedValueProto::kStructType:
      CheckStructuredPayload(path, ResolveStruct(path, e.struct_type()), e.raw_data().size());
      return;
    case EncodedValueProto::LAYOUT_NOT_SET:
      break;
  }
  Fail(ErrorCode::kInvalidArgument, path, "encoded value has no layout");
}

void ValueValidator::CheckEncoded(const std::string& path, const RuntimeValue& value,
                                  const TypeProto& declared, SymbolBindings& symbols) const {
  CheckEncodedPayload(path, value);
  const EncodedValueProto& e = value.encoded();
  if (declared.has_tensor_type()) {
    if (!e.has_affine())
      Fail(ErrorCode::kInvalidArgument, path,
           "declared as a tensor but the encoded value has a structured layout");
    const auto& t = declared.tensor_type();
    const auto logical = static_cast<DataType>(e.logical_type().tensor_type().elem_type());
    if (t.elem_type() != 0 && static_cast<DataType>(t.elem_type()) != logical)
      Fail(ErrorCode::kInvalidArgument, path,
           "encoded logical element type " + DataTypeName(logical) +
               " does not match the declared " +
               DataTypeName(static_cast<DataType>(t.elem_type())));
    CheckShape(path, EncodedLogicalDims(Where(path), e), t, symbols);
    return;
  }
  // Declared struct: the encoded storage type must declare the same fields.
  if (!e.has_struct_type())
    Fail(ErrorCode::kInvalidArgument, path,
         "declared as a struct but the encoded value has an affine tensor layout");
  const StructTypeProto& want = ResolveStruct(path, declared.struct_type());
  const StructTypeProto& have = ResolveStruct(path, e.struct_type());
  if (&want != &have && !FieldsEqual(want, have))
    Fail(ErrorCode::kInvalidArgument, path,
         "encoded storage type '" + have.name() + "' is not compatible with the declared struct '" +
             want.name() + "'");
}

void ValueValidator::CheckStruct(const std::string& path, const RuntimeValue& value,
                                 const TypeProto& declared, SymbolBindings& symbols) const {
  const StructTypeProto& s = ResolveStruct(path, declared.struct_type());
  const bool paged = IsPagedCacheStructure(value);
  if (s.field_size() == 0) {
    // Layout-less declarations are reserved for structurally recognized paged caches.
    if (!paged)
      Fail(ErrorCode::kInvalidArgument, path,
           "a layout-less struct declaration only accepts a paged cache ({\"blocks\": [...]} "
           "with start, length, key and value fields)");
  } else {
    for (const auto& [name, field] : value.fields()) {
      bool declared_field = false;
      for (const auto& f : s.field()) declared_field |= f.name() == name;
      if (!declared_field)
        Fail(ErrorCode::kInvalidArgument, path,
             "has field '" + name + "' that struct '" + s.name() + "' does not declare");
    }
    for (const auto& f : s.field()) {
      const RuntimeValue* field = value.FindField(f.name());
      if (field == nullptr)
        Fail(ErrorCode::kInvalidArgument, path,
             "is missing field '" + f.name() + "' of struct '" + s.name() +
                 "' (structured values are complete, not partial)");
      CheckValue(path + "." + f.name(), *field, f.type(), symbols, false);
    }
  }
  if (paged) CheckPagedCache(path, value);
}

void ValueValidator::CheckPagedCache(const std::string& path, const RuntimeValue& value) const {
  CheckPagedCachePages(
      "persistent value", path, value, [this](const std::string& p, const RuntimeValue& payload) {
        if (payload.is_encoded()) CheckEncodedPayload(p, payload);
        if (payload.is_tensor() && !payload.tensor().has_owner())
          Fail(ErrorCode::kInvalidArgument, p, "page storage has no owner and cannot be retained");
      });
}

void ValueValidator::CheckSequence(const std::string& path, const RuntimeValue& value,
                                   const TypeProto& declared, SymbolBindings& symbols) const {
  if (!declared.sequence_type().has_elem_type())
    Fail(ErrorCode::kInvalidModel, path, "sequence declaration has no elem_type");
  const RuntimeSequence& seq = value.elements();
  if (seq.empty()) return;
  CheckSequenceNode(path, *seq.root(), seq.root(), 0, &declared.sequence_type().elem_type(),
                    symbols);
}

void ValueValidator::CheckSequenceNode(const std::string& path, const RuntimeSequence::Node& node,
                                       const std::shared_ptr<const RuntimeSequence::Node>& handle,
                                       size_t offset, const TypeProto* elem_type,
                                       SymbolBindings& symbols) const {
  const void* id = &node;
  {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    auto it = memo_.find(id);
    if (it != memo_.end()) {
      for (const MemoEntry& e : it->second) {
        // The weak handle proves the address still denotes the node that was validated.
        auto alive = e.tree.lock();
        if (e.elem_type == elem_type && alive.get() == id) {
          memo_hits_.fetch_add(1, std::memory_order_relaxed);
          MergeSymbols(path, symbols, e.symbols);
          return;
        }
      }
    }
  }
  SymbolBindings local;
  if (node.leaf) {
    for (size_t i = 0; i < node.items.size(); ++i) {
      elements_validated_.fetch_add(1, std::memory_order_relaxed);
      CheckValue(path + "[" + std::to_string(offset + i) + "]", *node.items[i], *elem_type, local,
                 false);
    }
  } else {
    for (const auto& child : node.children) {
      CheckSequenceNode(path, *child, child, offset, elem_type, local);
      offset += child->size;
    }
  }
  MergeSymbols(path, symbols, local);
  std::lock_guard<std::mutex> lock(memo_mutex_);
  if (memo_.size() >= memo_prune_at_) {
    for (auto it = memo_.begin(); it != memo_.end();) {
      std::erase_if(it->second, [](const MemoEntry& e) { return e.tree.expired(); });
      it = it->second.empty() ? memo_.erase(it) : std::next(it);
    }
    memo_prune_at_ = std::max<size_t>(256, 2 * memo_.size());
  }
  auto& entries = memo_[id];
  std::erase_if(entries, [](const MemoEntry& e) { return e.tree.expired(); });
  entries.push_back(MemoEntry{handle, elem_type, std::move(local)});
}

void ValueValidator::CheckEncodedReferences(const std::string& key,
                                            const RuntimeValue& value) const {
  switch (value.kind()) {
    case RuntimeValue::Kind::kEncoded:
      CheckEncodedPayload(key, value);
      return;
    case RuntimeValue::Kind::kStruct:
      for (const auto& [name, field] : value.fields())
        CheckEncodedReferences(key + "." + name, field);
      return;
    case RuntimeValue::Kind::kSequence: {
      const RuntimeSequence& seq = value.elements();
      for (size_t i = 0; i < seq.size(); ++i)
        CheckEncodedReferences(key + "[" + std::to_string(i) + "]", seq[i]);
      return;
    }
    default:
      return;
  }
}

}  // namespace onnx_light::core::runtime
