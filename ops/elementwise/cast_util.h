// Value conversions between compute types with numpy's results and no undefined behaviour:
// float -> integer truncates toward zero, goes through int64 and wraps to narrower types;
// NaN and values outside int64 become INT64_MIN first (what numpy gives on x86). Anything
// -> BOOL is "!= 0" (NaN is true).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/elementwise/types.h"

namespace onnx_light::ops::elementwise {

template <typename To, typename From>
inline To ConvertValue(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From{0};
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if constexpr (std::is_same_v<To, uint64_t>) {
      if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return static_cast<uint64_t>(v);
    }
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
      return static_cast<To>(std::numeric_limits<int64_t>::min());
    return static_cast<To>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Every element of a numeric or BOOL tensor as double.
std::vector<double> ToDoubles(const KernelCall& call, const Tensor& t, const char* what);

}  // namespace onnx_light::ops::elementwise

namespace onnx_light::ops::elementwise {

// Converts `in` to dtype `to` into output 0 (numpy astype semantics; INT4/UINT4/INT2/UINT2
// wrap like ml_dtypes; float8 per the ONNX Cast table, `saturate` choosing clamping). A cast
// to the input's own type returns a view of the input. STRING, FLOAT4E2M1 and FLOAT8E8M0
// are kNotImplemented naming the node.
void CastToOutput(KernelCall& call, const Tensor& in, DataType to, bool saturate = true);

}  // namespace onnx_light::ops::elementwise
