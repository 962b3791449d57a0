// Element types: the values of TensorProto.DataType, their sizes (sub-byte types packed),
// and the 16-bit float conversions kernels share.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace onnx_light::core {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUint4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUint2 = 25,
  kInt2 = 26,
};

// Bits per element: 2 or 4 for packed types, 0 for kString and kUndefined.
int ElementBits(DataType type);
// Bytes needed for `count` elements, sub-byte types packed low bits first (ONNX order).
size_t StorageBytes(DataType type, int64_t count);
// "FLOAT", "INT64", ... as in TensorProto.DataType; "DataType(99)" for unknown values.
std::string DataTypeName(DataType type);
bool IsKnownDataType(int32_t value);
bool IsFloatingPoint(DataType type);  // FLOAT, DOUBLE, FLOAT16, BFLOAT16 (and float8/4)
bool IsPacked(DataType type);         // INT4/UINT4/INT2/UINT2/FLOAT4E2M1

// IEEE binary16 and bfloat16 as raw bits with exact round-to-nearest-even conversions.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

inline float BFloat16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t FloatToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float f);

// Sub-byte access: element i of packed storage, sign-extended for the signed types.
int32_t PackedGet(DataType type, const void* data, int64_t i);
void PackedSet(DataType type, void* data, int64_t i, int32_t value);

}  // namespace onnx_light::core
