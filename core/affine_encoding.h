// The affine layout of an inline encoded value (EncodedValueProto.affine), resolved and
// checked against its payload without decoding it: code type (storage_type, or inferred
// from signed_storage and the byte size), logical dims, scale and zero point (inline or
// through parameter_ref in the value's catalogue), per-tensor, per-axis or blocked.
// Persistent-value validation (state/) and the paged-cache kernels (ops/ai_rt/) share it.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace onnx_light {
class AffineLayoutProto;
class EncodedValueProto;
class TensorProto;
class TensorShapeProto;
}  // namespace onnx_light

namespace onnx_light::core::runtime {

class RuntimeValue;

struct AffineEncoding {
  DataType storage = DataType::kUndefined;  // the code type
  Shape dims;                               // the logical (decoded) shape
  const TensorProto* scale = nullptr;       // FLOAT, FLOAT16 or BFLOAT16
  const TensorProto* zero_point = nullptr;  // null: zero; else the storage type
  int64_t axis = -1;                        // -1: per-tensor
  int64_t block_size = 0;                   // > 0: blocked along axis
  bool per_tensor() const { return axis < 0; }
};

// The 8/4/2-bit (and 16-bit) integer types an affine payload may store.
bool IsAffineCodeType(DataType t);

// "[2, seq, ?]": a declared shape for messages.
std::string DimsString(const TensorShapeProto& shape);

// Concrete logical dims of an encoded value; `where` prefixes the message ("<where>: ...").
Shape EncodedLogicalDims(const std::string& where, const EncodedValueProto& encoded);

// The affine code type: storage_type when set, otherwise the unique signed/unsigned 8/4/2-bit
// width whose packed size of `numel` codes is `payload_bytes`. Throws kInvalidArgument.
DataType ResolveAffineStorageType(const std::string& where, const AffineLayoutProto& layout,
                                  int64_t numel, size_t payload_bytes);

// Resolves and checks the affine encoding of `value` (an encoded RuntimeValue whose layout is
// affine): inline payload, parameter_ref found in the value's catalogue, scale/zero-point
// shapes, types and extents. Throws kInvalidArgument "<where>: ..." on the first problem.
// The result points into `value`'s protos (valid while `value` lives).
AffineEncoding ResolveAffineEncoding(const std::string& where, const RuntimeValue& value);

// Elements a parameter tensor holds (raw or typed field) equal `numel`.
bool ParameterExtentMatches(const TensorProto& t, int64_t numel);
// Product of a TensorProto's dims (checked).
int64_t ProtoNumel(const TensorProto& t);

}  // namespace onnx_light::core::runtime
