// Compile-time dispatch over the row codes of math::CodeRows and the head counts of a query
// group, and the byte arithmetic of packed rows (shared by code_dot.cc's AVX2 kernels and
// code_dot_avx512.cc).
#pragma once

#include <cstdint>

#include "ops/math/code_dot.h"

namespace onnx_light::ops::math::code {

// Elements per byte of packed codes (1 for whole-byte and wider formats).
constexpr int PerByte(RowCode c) {
  return c == RowCode::kInt4 || c == RowCode::kUint4   ? 2
         : c == RowCode::kInt2 || c == RowCode::kUint2 ? 4
                                                       : 1;
}

// The bytes of `elements` elements (a multiple of PerByte(C)).
template <RowCode C>
constexpr uint64_t Bytes(uint64_t elements) {
  if constexpr (C == RowCode::kFloat) return 4 * elements;
  if constexpr (C == RowCode::kHalf || C == RowCode::kBFloat16) return 2 * elements;
  if constexpr (C == RowCode::kInt8 || C == RowCode::kUint8) return elements;
  if constexpr (C == RowCode::kInt4 || C == RowCode::kUint4) return elements / 2;
  return elements / 4;
}

// The first byte of element e (e a multiple of PerByte(C)).
template <RowCode C>
inline const uint8_t* ElementPtr(const void* data, int64_t e) {
  return static_cast<const uint8_t*>(data) + Bytes<C>(static_cast<uint64_t>(e));
}

// Calls fn.template operator()<C>() for the run's code.
template <class Fn>
void ByCode(RowCode c, Fn&& fn) {
  switch (c) {
    case RowCode::kFloat:
      return fn.template operator()<RowCode::kFloat>();
    case RowCode::kHalf:
      return fn.template operator()<RowCode::kHalf>();
    case RowCode::kBFloat16:
      return fn.template operator()<RowCode::kBFloat16>();
    case RowCode::kInt8:
      return fn.template operator()<RowCode::kInt8>();
    case RowCode::kUint8:
      return fn.template operator()<RowCode::kUint8>();
    case RowCode::kInt4:
      return fn.template operator()<RowCode::kInt4>();
    case RowCode::kUint4:
      return fn.template operator()<RowCode::kUint4>();
    case RowCode::kInt2:
      return fn.template operator()<RowCode::kInt2>();
    case RowCode::kUint2:
      return fn.template operator()<RowCode::kUint2>();
  }
}

template <int G, class Fn>
void ByHeads(int64_t g, Fn&& fn) {
  if constexpr (G > 1)
    if (g < G) return ByHeads<G - 1>(g, fn);
  fn.template operator()<G>();
}

}  // namespace onnx_light::ops::math::code
