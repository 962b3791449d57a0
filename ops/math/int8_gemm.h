// Exact 8-bit integer matrix products, C[M, N] (int32) = sum_k (A[m, k] - a_zero[m]) *
// (B[k, n] - b_zero[n]), with A and B each INT8 or UINT8 (MatMulInteger's semantics, and
// the core of the fused DynamicQuantizeMatMul). B is packed once (constant weights keep the
// pack) into strips of 16 columns, 4 consecutive k of a column in one 32-bit group, as
// AVX-512 VNNI's vpdpbusd (unsigned bytes times signed bytes, four products summed into each
// int32 lane, no saturation) reads it. Both operands are shifted to vpdpbusd's signs (B to
// signed: b - 128 for UINT8; A to unsigned: a + 128 for INT8) and the shifts and zero points
// folded out afterwards with the rows' and columns' sums:
//   sum_k (a - za)(b - zb) = sum a'b' + beta * sum_k a' - alpha * sum_k b' - alpha * beta * K
// (a' = a + sa, b' = b - sb, alpha = sa + za, beta = sb - zb), all in int32 as the ONNX
// reference computes it. Without VNNI a portable loop computes the same integers.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/math/vexp.h"

namespace onnx_light::ops::math {

class PackedInt8B {
 public:
  // B [K, N] row-major (ldb elements between rows), signed or not; b_zero: one value
  // (count 1) or one per column (count N), B's type.
  PackedInt8B(const void* b, bool b_signed, int64_t k, int64_t n, int64_t ldb, const void* b_zero,
              int64_t zero_count);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t k4() const { return k4_; }          // K in groups of 4, rounded up
  int64_t strips() const { return strips_; }  // N in strips of 16, rounded up
  size_t bytes() const { return data_.size() + 4 * (col_sums_.size() + beta_.size()); }
  const int8_t* data() const { return data_.data(); }
  const int32_t* col_sums() const { return col_sums_.data(); }
  const int32_t* beta() const { return beta_.data(); }

 private:
  int64_t k_ = 0, n_ = 0, k4_ = 0, strips_ = 0;
  std::vector<int8_t> data_;       // [group of 4 strips][k4][4 strips][16 columns][4 k]
  std::vector<int32_t> col_sums_;  // sum_k b' per column (padded to the strips)
  std::vector<int32_t> beta_;      // sb - zb per column
};

// C[m * ldc + n] for m < M, n < N: A [M, K] row-major (lda elements between rows), signed or
// not; a_zero: null (0), one value (count 1) or one per row (count M), A's type. `path`
// kPortable never takes the VNNI kernel (for the tests).
void Int8Gemm(const PackedInt8B& b, int64_t m, const void* a, bool a_signed, int64_t lda,
              const void* a_zero, int64_t a_zero_count, int32_t* c, int64_t ldc,
              VecPath path = VecPath::kAuto);

// The same products as FLOAT, each times its column's scale (scale_count N) or the one scale
// (scale_count 1): y[m * ldy + n] = float(C[m][n]) * scale[n], the int32 rounded to FLOAT
// first, as Cast then Mul would.
void Int8GemmToFloat(const PackedInt8B& b, int64_t m, const void* a, bool a_signed, int64_t lda,
                     const void* a_zero, int64_t a_zero_count, const float* scale,
                     int64_t scale_count, float* y, int64_t ldy, VecPath path = VecPath::kAuto);

}  // namespace onnx_light::ops::math
