#include "core/type_compat.h"

#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/proto_desc.h"

namespace onnx_light::core {

namespace {

std::string DimString(const TensorShapeProto::Dimension& d) {
  if (d.has_dim_value()) return std::to_string(d.dim_value());
  if (d.has_dim_param()) return d.dim_param();
  return "?";
}

std::string TensorIncompatibility(const TypeProto::Tensor& ta, const TypeProto::Tensor& tb,
                                  const std::string& what) {
  // An unset element type (a partial inference) matches any.
  if (ta.elem_type() != 0 && tb.elem_type() != 0 && ta.elem_type() != tb.elem_type())
    return what + ": element types differ (" + DataTypeName(static_cast<DataType>(ta.elem_type())) +
           " vs " + DataTypeName(static_cast<DataType>(tb.elem_type())) + ")";
  if (!ta.has_shape() || !tb.has_shape()) return "";
  if (ta.shape().dim_size() != tb.shape().dim_size())
    return what + ": ranks differ (" + std::to_string(ta.shape().dim_size()) + " vs " +
           std::to_string(tb.shape().dim_size()) + ")";
  for (int i = 0; i < ta.shape().dim_size(); ++i) {
    const auto& da = ta.shape().dim(i);
    const auto& db = tb.shape().dim(i);
    if (da.has_dim_value() && db.has_dim_value() && da.dim_value() != db.dim_value())
      return what + ": dimension " + std::to_string(i) + " differs (" + DimString(da) + " vs " +
             DimString(db) + ")";
  }
  return "";
}

std::string Incompatibility(const TypeProto& a, const TypeProto& b, const ModelProto* model,
                            const std::string& what, int depth);

std::string StructIncompatibility(const StructTypeProto& ra, const StructTypeProto& rb,
                                  const ModelProto* model, const std::string& what, int depth) {
  if (model == nullptr && (!ra.type_ref().empty() || !rb.type_ref().empty())) {
    return ra.type_ref() == rb.type_ref()
               ? ""
               : what + ": struct type references differ (" + Quote(ra.type_ref()) + " vs " +
                     Quote(rb.type_ref()) + ")";
  }
  const StructTypeProto& sa = ResolveStruct(ra, model, what);
  const StructTypeProto& sb = ResolveStruct(rb, model, what);
  // A layout-less struct is the paged-cache declaration: it accepts either form.
  if (sa.field_size() == 0 || sb.field_size() == 0) return "";
  if (sa.field_size() != sb.field_size())
    return what + ": struct field counts differ (" + std::to_string(sa.field_size()) + " vs " +
           std::to_string(sb.field_size()) + ")";
  for (int i = 0; i < sa.field_size(); ++i) {
    if (sa.field(i).name() != sb.field(i).name())
      return what + ": struct field " + std::to_string(i) + " is named " +
             Quote(sa.field(i).name()) + " vs " + Quote(sb.field(i).name());
    std::string why = Incompatibility(sa.field(i).type(), sb.field(i).type(), model,
                                      what + "." + sa.field(i).name(), depth + 1);
    if (!why.empty()) return why;
  }
  return "";
}

std::string Incompatibility(const TypeProto& a, const TypeProto& b, const ModelProto* model,
                            const std::string& what, int depth) {
  if (depth >= kMaxTypeDepth) return what + ": type nesting is too deep";
  if (a.value_case() != b.value_case()) return what + ": the kinds of type differ";
  switch (a.value_case()) {
    case TypeProto::kTensorType:
      return TensorIncompatibility(a.tensor_type(), b.tensor_type(), what);
    case TypeProto::kSequenceType:
      return Incompatibility(a.sequence_type().elem_type(), b.sequence_type().elem_type(), model,
                             what + "[]", depth + 1);
    case TypeProto::kStructType:
      return StructIncompatibility(a.struct_type(), b.struct_type(), model, what, depth);
    default:
      return "";
  }
}

// Why the tensor field `name` of a cache block is not declared as `want` with `rank`
// (-1: any), or "".
std::string BlockFieldError(const StructFieldProto& field, int32_t want, int rank) {
  const std::string what = "block field " + Quote(field.name());
  if (!field.type().has_tensor_type()) return what + " is not a tensor";
  const auto& t = field.type().tensor_type();
  if (t.elem_type() != 0 && t.elem_type() != want)
    return what + " has element type " + DataTypeName(static_cast<DataType>(t.elem_type())) +
           ", expected " + DataTypeName(static_cast<DataType>(want));
  if (rank >= 0 && t.has_shape() && t.shape().dim_size() != rank)
    return what + " has rank " + std::to_string(t.shape().dim_size()) + ", expected " +
           std::to_string(rank);
  return "";
}

std::string BlockError(const TypeProto& elem, const ModelProto* model, const std::string& what) {
  if (!elem.has_struct_type()) return "the elements of 'blocks' are not structs";
  const StructTypeProto& block = ResolveStruct(elem.struct_type(), model, what);
  std::set<std::string> names;
  for (const auto& f : block.field()) names.insert(f.name());
  if (block.field_size() != 4 || names != std::set<std::string>{"key", "length", "start", "value"})
    return "a block must have exactly the fields start, length, key and value";
  for (const auto& f : block.field()) {
    const bool range = f.name() == "start" || f.name() == "length";
    std::string why =
        BlockFieldError(f, range ? TensorProto::INT64 : TensorProto::FLOAT, range ? 0 : -1);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace

const char* TypeKindName(const TypeProto& type) {
  switch (type.value_case()) {
    case TypeProto::kTensorType:
      return "tensor";
    case TypeProto::kSequenceType:
      return "sequence";
    case TypeProto::kMapType:
      return "map";
    case TypeProto::kOptionalType:
      return "optional";
    case TypeProto::kSparseTensorType:
      return "sparse tensor";
    case TypeProto::kOpaqueType:
      return "opaque";
    case TypeProto::kStructType:
      return "struct";
    case TypeProto::VALUE_NOT_SET:
      break;
  }
  return "untyped";
}

const StructTypeProto* FindStruct(const StructTypeProto& s, const ModelProto* model) {
  const StructTypeProto* cur = &s;
  for (int hops = 0; cur != nullptr && !cur->type_ref().empty(); ++hops) {
    if (hops >= kMaxTypeDepth || model == nullptr) return nullptr;
    const StructTypeProto* next = nullptr;
    for (const auto& entry : model->struct_types())
      if (entry.name() == cur->type_ref()) next = &entry;
    cur = next;
  }
  return cur;
}

const StructTypeProto& ResolveStruct(const StructTypeProto& s, const ModelProto* model,
                                     const std::string& what) {
  if (const StructTypeProto* found = FindStruct(s, model)) return *found;
  // Unresolvable: walk again to say why.
  const StructTypeProto* cur = &s;
  for (int hops = 0; !cur->type_ref().empty(); ++hops) {
    OL_CHECK(hops < kMaxTypeDepth, ErrorCode::kInvalidModel,
             what + ": struct type references are cyclic (through " + Quote(cur->type_ref()) + ")");
    OL_CHECK(model != nullptr, ErrorCode::kInvalidModel,
             what + ": struct type_ref " + Quote(cur->type_ref()) +
                 " cannot be resolved without the model's struct_types");
    const StructTypeProto* next = nullptr;
    for (const auto& entry : model->struct_types())
      if (entry.name() == cur->type_ref()) next = &entry;
    OL_CHECK(next != nullptr, ErrorCode::kInvalidModel,
             what + ": struct type_ref " + Quote(cur->type_ref()) +
                 " is not declared in ModelProto.struct_types");
    cur = next;
  }
  return *cur;
}

std::string TypeIncompatibility(const TypeProto& a, const TypeProto& b, const ModelProto* model,
                                const std::string& what) {
  return Incompatibility(a, b, model, what, 0);
}

std::string PagedCacheDeclarationError(const TypeProto& type, const ModelProto* model,
                                       const std::string& what) {
  if (!type.has_struct_type()) return "not a struct declaration";
  const StructTypeProto& cache = ResolveStruct(type.struct_type(), model, what);
  if (cache.field_size() == 0) return "";  // layout-less: the runtime validates the pages
  if (cache.field_size() != 1 || cache.field(0).name() != "blocks")
    return "a paged cache struct has exactly one field 'blocks'";
  const TypeProto& blocks = cache.field(0).type();
  if (!blocks.has_sequence_type() || !blocks.sequence_type().has_elem_type())
    return "field 'blocks' is not a typed sequence";
  return BlockError(blocks.sequence_type().elem_type(), model, what + ".blocks[]");
}

}  // namespace onnx_light::core
