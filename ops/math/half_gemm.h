// Products with a FLOAT16 weight, without a FLOAT copy of it: Y[M, N] = A[M, K] x B[K, N],
// A and Y FLOAT, B FLOAT16 (a FLOAT16 model's MatMul weights), read as 16 bits and converted
// in registers: half the bytes a FLOAT pack would stream. Few rows (decode) run a GEMV that
// reads each B row once for all of them; more rows run the packed SGEMM on FLOAT panels
// converted as it reaches them (math::SgemmFromPanels). B is either row-major as the file
// holds it, or a PackedHalfB: 16-column panels, each one sequential stream (what a
// constant weight gets on its second use, ConstantWeight::GetHalf).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace onnx_light::ops::math {

// Rows up to which the streaming GEMV runs (each B row is read once for all of them).
constexpr int64_t kHalfGemvMaxRows = 4;

void HalfWeightGemm(const float* a, int64_t m, int64_t k, const uint16_t* b, int64_t n, float* y);

// Row-major FLOAT16 [K, N] as panels of 16 columns (the last zero padded): panel q holds
// rows 0 .. K - 1 of columns 16q .. 16q + 15, 16 halves a row, contiguous.
class PackedHalfB {
 public:
  // b: a dense [K, N] matrix; with transposed_ld > 0, the [N, K] matrix with that row stride
  // whose transpose is B (a tied embedding read by the LM head).
  PackedHalfB(const uint16_t* b, int64_t k, int64_t n, int64_t transposed_ld = 0);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t panels() const { return (n_ + 15) / 16; }
  size_t bytes() const { return static_cast<size_t>(panels() * k_ * 16) * sizeof(uint16_t); }
  const uint16_t* panel(int64_t q) const { return data_.get() + q * k_ * 16; }

 private:
  int64_t k_, n_;
  std::unique_ptr<uint16_t[]> data_;
};

void HalfWeightGemm(const float* a, int64_t m, const PackedHalfB& b, float* y);

}  // namespace onnx_light::ops::math
