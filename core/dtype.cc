#include "core/dtype.h"

#include "core/checked_math.h"

namespace onnx_light::core {

int ElementBits(DataType type) {
  switch (type) {
    case DataType::kFloat:
    case DataType::kInt32:
    case DataType::kUint32:
      return 32;
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kBool:
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ:
    case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ:
    case DataType::kFloat8E8M0:
      return 8;
    case DataType::kUint16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 16;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kDouble:
    case DataType::kComplex64:
      return 64;
    case DataType::kComplex128:
      return 128;
    case DataType::kUint4:
    case DataType::kInt4:
    case DataType::kFloat4E2M1:
      return 4;
    case DataType::kUint2:
    case DataType::kInt2:
      return 2;
    case DataType::kString:
    case DataType::kUndefined:
      return 0;
  }
  return 0;
}

size_t StorageBytes(DataType type, int64_t count) {
  return CheckedStorageBytes(type, count, "byte size");
}

bool IsKnownDataType(int32_t value) { return value >= 1 && value <= 26; }

std::string DataTypeName(DataType type) {
  static const char* const kNames[] = {
      "UNDEFINED",      "FLOAT",    "UINT8",        "INT8",           "UINT16",
      "INT16",          "INT32",    "INT64",        "STRING",         "BOOL",
      "FLOAT16",        "DOUBLE",   "UINT32",       "UINT64",         "COMPLEX64",
      "COMPLEX128",     "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
      "FLOAT8E5M2FNUZ", "UINT4",    "INT4",         "FLOAT4E2M1",     "FLOAT8E8M0",
      "UINT2",          "INT2"};
  const int v = static_cast<int>(type);
  if (v >= 0 && v <= 26) return kNames[v];
  return "DataType(" + std::to_string(v) + ")";
}

bool IsFloatingPoint(DataType type) {
  switch (type) {
    case DataType::kFloat:
    case DataType::kDouble:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ:
    case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ:
    case DataType::kFloat4E2M1:
    case DataType::kFloat8E8M0:
      return true;
    default:
      return false;
  }
}

bool IsPacked(DataType type) { return ElementBits(type) > 0 && ElementBits(type) < 8; }

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow -> inf
  if (abs < 0x38800000u) {                        // subnormal or zero
    if (abs < 0x33000000u) return sign;           // underflow to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 bits shifted out
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

int32_t PackedGet(DataType type, const void* data, int64_t i) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (ElementBits(type) == 4) {
    const uint8_t b = bytes[i >> 1];
    int32_t v = (i & 1) ? (b >> 4) : (b & 0xf);
    if (type == DataType::kInt4 && v >= 8) v -= 16;
    return v;
  }
  const uint8_t b = bytes[i >> 2];
  int32_t v = (b >> ((i & 3) * 2)) & 0x3;
  if (type == DataType::kInt2 && v >= 2) v -= 4;
  return v;
}

void PackedSet(DataType type, void* data, int64_t i, int32_t value) {
  auto* bytes = static_cast<uint8_t*>(data);
  if (ElementBits(type) == 4) {
    uint8_t& b = bytes[i >> 1];
    const uint8_t nib = static_cast<uint8_t>(value & 0xf);
    b = (i & 1) ? static_cast<uint8_t>((b & 0x0f) | (nib << 4))
                : static_cast<uint8_t>((b & 0xf0) | nib);
    return;
  }
  uint8_t& b = bytes[i >> 2];
  const int shift = static_cast<int>((i & 3) * 2);
  b = static_cast<uint8_t>((b & ~(0x3 << shift)) | ((value & 0x3) << shift));
}

}  // namespace onnx_light::core
