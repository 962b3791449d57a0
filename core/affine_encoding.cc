#include "core/affine_encoding.h"

#include <algorithm>
#include <span>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/runtime_value.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {
namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& message) {
  Throw(ErrorCode::kInvalidArgument, where + ": " + message);
}

// The layout holding the parameters: the inline one, or the shared entry it references.
const AffineLayoutProto& Parameters(const std::string& where, const RuntimeValue& value) {
  const EncodedValueProto& e = value.encoded();
  if (e.parameter_ref().empty()) return e.affine();
  const auto& catalogue = value.catalogue();
  if (catalogue == nullptr)
    Fail(where, "parameter_ref '" + e.parameter_ref() +
                    "' cannot be resolved: the value carries no parameter catalogue");
  auto it = catalogue->entries.find(e.parameter_ref());
  if (it == catalogue->entries.end() || it->second == nullptr)
    Fail(where, "parameter_ref '" + e.parameter_ref() + "' names no shared parameter");
  return *it->second;
}

// The expected scale dims of a per-axis or blocked layout (empty for per-tensor).
Shape ExpectedScaleDims(const std::string& where, const AffineLayoutProto& params,
                        const Shape& dims, int64_t* axis) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const bool per_axis = params.has_axis() || params.block_size() > 0;
  *axis = -1;
  if (!per_axis) return {};
  if (!params.has_axis()) Fail(where, "blocked affine layout has no axis");
  *axis = params.axis();
  if (*axis < -rank || *axis >= rank)
    Fail(where, "affine axis " + std::to_string(*axis) + " is out of range for rank " +
                    std::to_string(rank));
  if (*axis < 0) *axis += rank;
  const size_t a = static_cast<size_t>(*axis);
  if (params.block_size() == 0) return {dims[a]};
  Shape expected = dims;
  const auto block = static_cast<int64_t>(params.block_size());
  expected[a] = (dims[a] + block - 1) / block;
  return expected;
}

void CheckScale(const std::string& where, const AffineLayoutProto& params, const Shape& dims,
                const Shape& expected, int64_t axis) {
  if (!params.has_scale()) Fail(where, "affine layout has no scale");
  const TensorProto& scale = params.scale();
  const auto scale_type = static_cast<DataType>(scale.data_type());
  if (scale_type != DataType::kFloat && scale_type != DataType::kFloat16 &&
      scale_type != DataType::kBFloat16)
    Fail(where, "affine scale must be FLOAT, FLOAT16 or BFLOAT16, got " + DataTypeName(scale_type));
  const Shape scale_dims(scale.dims().begin(), scale.dims().end());
  const bool per_axis = axis >= 0;
  const bool scalar_scale =
      ProtoNumel(scale) == 1 &&
      std::all_of(scale_dims.begin(), scale_dims.end(), [](int64_t d) { return d == 1; });
  if (per_axis ? scale_dims != expected : !scalar_scale)
    Fail(where, "affine scale shape " + ShapeToString(scale_dims) + " does not fit " +
                    (per_axis ? "the expected " + ShapeToString(expected) + " for axis " +
                                    std::to_string(axis) +
                                    (params.block_size() > 0
                                         ? " and block_size " + std::to_string(params.block_size())
                                         : std::string())
                              : std::string("a per-tensor (scalar) layout")) +
                    " of logical shape " + ShapeToString(dims));
  if (!ParameterExtentMatches(scale, ProtoNumel(scale)))
    Fail(where, "affine scale payload does not match its dims");
}

void CheckZeroPoint(const std::string& where, const TensorProto& zp, const TensorProto& scale,
                    DataType storage) {
  const Shape zp_dims(zp.dims().begin(), zp.dims().end());
  const Shape scale_dims(scale.dims().begin(), scale.dims().end());
  if (zp_dims != scale_dims)
    Fail(where, "affine zero_point shape " + ShapeToString(zp_dims) +
                    " differs from the scale shape " + ShapeToString(scale_dims));
  if (static_cast<DataType>(zp.data_type()) != storage)
    Fail(where, "affine zero_point type " + DataTypeName(static_cast<DataType>(zp.data_type())) +
                    " differs from the storage type " + DataTypeName(storage));
  if (!ParameterExtentMatches(zp, ProtoNumel(zp)))
    Fail(where, "affine zero_point payload does not match its dims");
}

}  // namespace

bool IsAffineCodeType(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt4:
    case DataType::kUint4:
    case DataType::kInt2:
    case DataType::kUint2:
    case DataType::kInt16:
    case DataType::kUint16:
      return true;
    default:
      return false;
  }
}

std::string DimsString(const TensorShapeProto& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.dim_size(); ++i) {
    if (i) out += ", ";
    const auto& d = shape.dim(i);
    if (d.has_dim_value())
      out += std::to_string(d.dim_value());
    else if (!d.dim_param().empty())
      out += d.dim_param();
    else
      out += "?";
  }
  return out + "]";
}

Shape EncodedLogicalDims(const std::string& where, const EncodedValueProto& encoded) {
  if (!encoded.has_logical_type() || !encoded.logical_type().has_tensor_type())
    Fail(where, "encoded value has no logical tensor type");
  const auto& tensor = encoded.logical_type().tensor_type();
  if (!tensor.has_shape()) Fail(where, "encoded logical type has no rank");
  Shape dims;
  for (int i = 0; i < tensor.shape().dim_size(); ++i) {
    const auto& d = tensor.shape().dim(i);
    if (!d.has_dim_value() || d.dim_value() < 0)
      Fail(where, "encoded logical shape " + DimsString(tensor.shape()) +
                      " is not concrete at axis " + std::to_string(i) +
                      " (persistent values always have concrete dimensions)");
    dims.push_back(d.dim_value());
  }
  return dims;
}

int64_t ProtoNumel(const TensorProto& t) {
  return CheckedNumel(std::span(t.dims().data(), static_cast<size_t>(t.dims_size())),
                      "tensor '" + t.name() + "'");
}

bool ParameterExtentMatches(const TensorProto& t, int64_t numel) {
  const auto dtype = static_cast<DataType>(t.data_type());
  if (t.has_raw_data()) return t.raw_data().size() == StorageBytes(dtype, numel);
  switch (dtype) {
    case DataType::kFloat:
      return t.float_data_size() == numel;
    case DataType::kDouble:
      return t.double_data_size() == numel;
    case DataType::kInt64:
      return t.int64_data_size() == numel;
    case DataType::kUint32:
    case DataType::kUint64:
      return t.uint64_data_size() == numel;
    default:
      break;
  }
  // int32_data carries one element per entry, packed types two (4-bit) or four (2-bit).
  const int bits = ElementBits(dtype);
  const int64_t per_entry = bits > 0 && bits < 8 ? 8 / bits : 1;
  return t.int32_data_size() == (numel + per_entry - 1) / per_entry;
}

DataType ResolveAffineStorageType(const std::string& where, const AffineLayoutProto& layout,
                                  int64_t numel, size_t payload_bytes) {
  if (layout.has_storage_type() && layout.storage_type() != 0) {
    const auto storage = static_cast<DataType>(layout.storage_type());
    if (!IsKnownDataType(layout.storage_type()) || !IsAffineCodeType(storage))
      Fail(where, "unsupported affine storage type " + DataTypeName(storage));
    if (StorageBytes(storage, numel) != payload_bytes)
      Fail(where, "payload has " + std::to_string(payload_bytes) + " bytes but " +
                      std::to_string(numel) + " " + DataTypeName(storage) + " codes need " +
                      std::to_string(StorageBytes(storage, numel)));
    return storage;
  }
  if (!layout.has_signed_storage())
    Fail(where, "affine layout has neither storage_type nor signed_storage");
  const bool is_signed = layout.signed_storage();
  const DataType candidates[] = {
      is_signed ? DataType::kInt8 : DataType::kUint8,
      is_signed ? DataType::kInt4 : DataType::kUint4,
      is_signed ? DataType::kInt2 : DataType::kUint2,
  };
  std::vector<DataType> matches;
  for (DataType c : candidates)
    if (StorageBytes(c, numel) == payload_bytes) matches.push_back(c);
  if (matches.empty())
    Fail(where, "payload of " + std::to_string(payload_bytes) +
                    " bytes fits no 8/4/2-bit code width for " + std::to_string(numel) +
                    " elements");
  if (matches.size() > 1) {
    std::string names;
    for (DataType m : matches) names += (names.empty() ? "" : " or ") + DataTypeName(m);
    Fail(where, "ambiguous code width: " + std::to_string(payload_bytes) + " bytes for " +
                    std::to_string(numel) + " elements could be " + names + "; set storage_type");
  }
  return matches.front();
}

AffineEncoding ResolveAffineEncoding(const std::string& where, const RuntimeValue& value) {
  const EncodedValueProto& e = value.encoded();
  if (e.external_data_size() > 0 || e.data_location() == TensorProto::EXTERNAL)
    Fail(where, "encoded payload is stored externally; load external data first");
  if (e.layout_case() != EncodedValueProto::kAffine) Fail(where, "encoded value is not affine");
  const AffineLayoutProto& params = Parameters(where, value);
  AffineEncoding out;
  out.dims = EncodedLogicalDims(where, e);
  const auto logical = static_cast<DataType>(e.logical_type().tensor_type().elem_type());
  if (logical == DataType::kString) Fail(where, "string tensors cannot be persistent");
  // The inline layout's code type wins over the shared entry's when it names one.
  AffineLayoutProto codes;
  const AffineLayoutProto& code_source =
      (e.affine().has_storage_type() || e.affine().has_signed_storage()) ? e.affine() : params;
  if (code_source.has_storage_type()) codes.set_storage_type(code_source.storage_type());
  if (code_source.has_signed_storage()) codes.set_signed_storage(code_source.signed_storage());
  out.storage = ResolveAffineStorageType(where, codes, ShapeNumel(out.dims), e.raw_data().size());
  const Shape expected = ExpectedScaleDims(where, params, out.dims, &out.axis);
  CheckScale(where, params, out.dims, expected, out.axis);
  out.scale = &params.scale();
  if (params.has_zero_point()) {
    CheckZeroPoint(where, params.zero_point(), params.scale(), out.storage);
    out.zero_point = &params.zero_point();
  }
  out.block_size = static_cast<int64_t>(params.block_size());
  return out;
}

}  // namespace onnx_light::core::runtime
