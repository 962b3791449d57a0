// Element-type plumbing shared by the tensor kernels: storage types per DataType, loads and
// stores through a compute type (FLOAT16/BFLOAT16 compute in float), dispatch over the
// dtypes an op allows, and the errors that name the node and the dtype.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "executor/attributes.h"
#include "executor/kernel.h"

namespace onnx_light::ops::elementwise {

using core::BFloat16;
using core::DataType;
using core::Float16;
using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

template <typename T>
struct TypeTag {
  using type = T;
};

// The type arithmetic runs in: float for the 16-bit floats, the storage type otherwise.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<Float16> {
  using type = float;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};
template <typename T>
using Compute = typename ComputeOf<T>::type;

template <typename T>
inline Compute<T> Load(T v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return core::HalfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return core::BFloat16ToFloat(v.bits);
  } else {
    return v;
  }
}

template <typename T, typename C>
inline T Store(C v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return Float16{core::FloatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{core::FloatToBFloat16(static_cast<float>(v))};
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<Compute<T>>;

// Bit sets of dtypes an op accepts.
using TypeSet = uint64_t;
constexpr TypeSet Bit(DataType t) { return TypeSet{1} << static_cast<int>(t); }
constexpr TypeSet kFloatTypes = Bit(DataType::kFloat) | Bit(DataType::kDouble) |
                                Bit(DataType::kFloat16) | Bit(DataType::kBFloat16);
constexpr TypeSet kSignedIntTypes =
    Bit(DataType::kInt8) | Bit(DataType::kInt16) | Bit(DataType::kInt32) | Bit(DataType::kInt64);
constexpr TypeSet kUnsignedIntTypes = Bit(DataType::kUint8) | Bit(DataType::kUint16) |
                                      Bit(DataType::kUint32) | Bit(DataType::kUint64);
constexpr TypeSet kIntTypes = kSignedIntTypes | kUnsignedIntTypes;
constexpr TypeSet kNumericTypes = kFloatTypes | kIntTypes;
constexpr TypeSet kBoolType = Bit(DataType::kBool);
constexpr TypeSet kNumericAndBool = kNumericTypes | kBoolType;

inline bool InSet(TypeSet set, DataType t) {
  const int v = static_cast<int>(t);
  return v >= 0 && v < 64 && (set & (TypeSet{1} << v)) != 0;
}

// "<Op> node '<name>': <what> of type <DTYPE> is not supported" as kNotImplemented.
[[noreturn]] inline void UnsupportedType(const KernelCall& call, DataType t,
                                         const std::string& what = "input") {
  core::Throw(core::ErrorCode::kNotImplemented, core::runtime::NodeLabel(call.node()) + ": " +
                                                    what + " of type " + core::DataTypeName(t) +
                                                    " is not supported");
}

// Calls f(TypeTag<T>{}) for the storage type T of `t` if `t` is in `kAllowed` (only those
// types are instantiated).
template <TypeSet kAllowed, typename F>
void DispatchType(const KernelCall& call, DataType t, F&& f, const std::string& what = "input") {
  if (!InSet(kAllowed, t)) UnsupportedType(call, t, what);
#define OL_DISPATCH_CASE(dt, T)                \
  case dt:                                     \
    if constexpr ((kAllowed & Bit(dt)) != 0) { \
      f(TypeTag<T>{});                         \
      return;                                  \
    }                                          \
    break;
  switch (t) {
    OL_DISPATCH_CASE(DataType::kFloat, float)
    OL_DISPATCH_CASE(DataType::kDouble, double)
    OL_DISPATCH_CASE(DataType::kFloat16, Float16)
    OL_DISPATCH_CASE(DataType::kBFloat16, BFloat16)
    OL_DISPATCH_CASE(DataType::kInt8, int8_t)
    OL_DISPATCH_CASE(DataType::kInt16, int16_t)
    OL_DISPATCH_CASE(DataType::kInt32, int32_t)
    OL_DISPATCH_CASE(DataType::kInt64, int64_t)
    OL_DISPATCH_CASE(DataType::kUint8, uint8_t)
    OL_DISPATCH_CASE(DataType::kUint16, uint16_t)
    OL_DISPATCH_CASE(DataType::kUint32, uint32_t)
    OL_DISPATCH_CASE(DataType::kUint64, uint64_t)
    OL_DISPATCH_CASE(DataType::kBool, bool)
    default:
      break;
  }
#undef OL_DISPATCH_CASE
  UnsupportedType(call, t, what);
}

// For data movement: a storage type of the element's width (std::string for STRING).
struct Bytes16 {
  uint64_t lo, hi;
};
template <typename F>
decltype(auto) DispatchByWidth(const KernelCall& call, DataType t, F&& f,
                               const std::string& what = "input") {
  if (t == DataType::kString) return f(TypeTag<std::string>{});
  switch (core::ElementBits(t)) {
    case 8:
      return f(TypeTag<uint8_t>{});
    case 16:
      return f(TypeTag<uint16_t>{});
    case 32:
      return f(TypeTag<uint32_t>{});
    case 64:
      return f(TypeTag<uint64_t>{});
    case 128:
      return f(TypeTag<Bytes16>{});
    default:
      UnsupportedType(call, t, what);
  }
}

// Integer values of an INT32/INT64 tensor (indices, shapes, axes, repeats...).
std::vector<int64_t> ReadInt64s(const KernelCall& call, const Tensor& t, const char* what);
// Normalises an axis in [-rank, rank) ( [-rank-1, rank] when `insert`), else fails naming it.
int64_t NormalizeAxis(const KernelCall& call, int64_t axis, int64_t rank,
                      const char* what = "axis");

// "[2, 3]" shapes joined for messages: "'a' [2, 3] and 'b' [4]".
std::string DescribeInputs(const KernelCall& call);

}  // namespace onnx_light::ops::elementwise
