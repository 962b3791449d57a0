// Elementwise unary kernels: one generic loop (or an array function for FLOAT), parallel over
// chunks, FLOAT16/BFLOAT16 converted to float a small block at a time (no full-size
// temporary).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

enum UnaryTypes : unsigned {
  kFloatTypes = 1,  // FLOAT, DOUBLE, FLOAT16, BFLOAT16
  kSignedInts = 2,  // INT8, INT16, INT32, INT64
};

namespace detail {
template <typename T, class F>
void UnaryLoop(const Tensor& x, Tensor& y, const F& f) {
  const T* xp = x.data<T>();
  T* yp = y.mutable_data<T>();
  ParallelFor(x.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) yp[i] = static_cast<T>(f(xp[i]));
  });
}
// FLOAT16/BFLOAT16 through float: `block(buf, n)` rewrites n floats in place.
template <class B>
void UnaryHalf(const Tensor& x, Tensor& y, const B& block) {
  const DataType dt = x.dtype();
  const auto* xp = static_cast<const uint16_t*>(x.raw_data());
  auto* yp = static_cast<uint16_t*>(y.mutable_raw_data());
  ParallelFor(x.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 256;
    float buf[kBlock];
    for (int64_t i = b; i < e; i += kBlock) {
      const int64_t n = std::min(kBlock, e - i);
      ToFloat(dt, xp + i, buf, n);
      block(buf, n);
      FromFloat(buf, dt, yp + i, n);
    }
  });
}
}  // namespace detail

// y = f(x) with y of x's dtype and shape. `f` is generic (called with float, double or the
// integer type); `kTypes` says which dtype families the op defines.
template <unsigned kTypes = kFloatTypes, class F>
void Unary(KernelCall& call, const F& f) {
  const Tensor& x = call.input(0);
  const DataType dt = x.dtype();
  constexpr bool kFloats = (kTypes & kFloatTypes) != 0;
  constexpr bool kInts = (kTypes & kSignedInts) != 0;
  if constexpr (kFloats) {
    if (dt == DataType::kFloat)
      return detail::UnaryLoop<float>(x, call.AllocateOutput(0, dt, x.shape()), f);
    if (dt == DataType::kDouble)
      return detail::UnaryLoop<double>(x, call.AllocateOutput(0, dt, x.shape()), f);
    if (IsHalfType(dt))
      return detail::UnaryHalf(x, call.AllocateOutput(0, dt, x.shape()), [&](float* v, int64_t n) {
        for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(f(v[j]));
      });
  }
  if constexpr (kInts) {
    if (dt == DataType::kInt8)
      return detail::UnaryLoop<int8_t>(x, call.AllocateOutput(0, dt, x.shape()), f);
    if (dt == DataType::kInt16)
      return detail::UnaryLoop<int16_t>(x, call.AllocateOutput(0, dt, x.shape()), f);
    if (dt == DataType::kInt32)
      return detail::UnaryLoop<int32_t>(x, call.AllocateOutput(0, dt, x.shape()), f);
    if (dt == DataType::kInt64)
      return detail::UnaryLoop<int64_t>(x, call.AllocateOutput(0, dt, x.shape()), f);
  }
  ThrowUnsupportedType(call.node(), "input 'X'", dt);
}

// y = f(x) for the float types, where FLOAT runs the array function
// `vf(const float* x, float* y, int64_t n)` over each parallel chunk (a vectorised kernel,
// see ops/math/vexp.h), FLOAT16/BFLOAT16 run it in place on each converted block, and
// DOUBLE runs the scalar `f(double)` per element.
template <class VF, class F>
void UnaryFloatArray(KernelCall& call, const VF& vf, const F& f) {
  const Tensor& x = call.input(0);
  const DataType dt = x.dtype();
  if (dt == DataType::kFloat) {
    Tensor& y = call.AllocateOutput(0, dt, x.shape());
    const float* xp = x.data<float>();
    float* yp = y.mutable_data<float>();
    ParallelFor(x.numel(), 1 << 14, [&](int64_t b, int64_t e) { vf(xp + b, yp + b, e - b); });
    return;
  }
  if (dt == DataType::kDouble)
    return detail::UnaryLoop<double>(x, call.AllocateOutput(0, dt, x.shape()), f);
  if (IsHalfType(dt))
    return detail::UnaryHalf(x, call.AllocateOutput(0, dt, x.shape()),
                             [&](float* v, int64_t n) { vf(v, v, n); });
  ThrowUnsupportedType(call.node(), "input 'X'", dt);
}

}  // namespace onnx_light::ops::math
