// Dot products and weighted row sums straight on stored rows: dense FLOAT, FLOAT16, BFLOAT16
// or affine INT8/UINT8/INT4/UINT4/INT2/UINT2 codes with one scale and zero point per run of
// rows. Nothing is decoded to memory: each chunk of 8 elements is widened to FLOAT in
// registers once and used for every head of the group, so a quantized row costs its code
// bytes of memory traffic, not 4 bytes per element.
//
//   value(t, d) = (code(t, d) - zero) * scale   (dense formats: scale 1, zero 0)
//   dots:  s[g][t] = scale * sum_d q[g][d] * (code(t, d) - zero)
//   sums:  y[g][d] = y[g][d] * rescale[g] + sum_t w[g][t] * scale * (code(t, d) - zero)
//
// (code - zero) is exact in FLOAT for every code width here, so the only rounding beyond the
// FLOAT path's is the scale applied once per dot (keys) and once per weight (values): results
// agree with decode-then-dot to a few FLOAT ulps of the sums (tests/cpp/ops_ai_rt/
// test_paged_code_dot.cc states the tolerance). AVX-512F for widths that are a multiple of 16
// (code_dot_avx512.cc), else AVX2+FMA when the CPU has it, else portable (`path` forces one
// for the tests: kAvx2 never takes AVX-512, kPortable never a vector kernel); packed 4/2-bit
// rows whose elements do not start on a byte take the portable path.
#pragma once

#include <cstdint>

#include "ops/math/vexp.h"

namespace onnx_light::ops::math {

enum class RowCode : uint8_t {
  kFloat,
  kHalf,
  kBFloat16,
  kInt8,
  kUint8,
  kInt4,
  kUint4,
  kInt2,
  kUint2
};

// `rows` rows of `width` (the call's d) consecutive elements, the first at element index
// `first` of `data` (packed codes: low bits first, as ONNX packs INT4/INT2).
struct CodeRows {
  RowCode code = RowCode::kFloat;
  const void* data = nullptr;
  int64_t first = 0;
  int64_t rows = 0;
  float scale = 1.0f;
  float zero = 0.0f;
  // Optional: the first byte of rows laid out as these (same code, width and count) that the
  // caller reads next. The AVX-512 kernels prefetch each of their lines into L2 as they read
  // the same line here, so the next block's reads are spread over this block's arithmetic
  // instead of asked for in one burst that stalls it (see PrefetchesAhead).
  const void* ahead = nullptr;
};

// True when GroupCodeDots / GroupCodeWeightedRowSums (path kAuto) honour `run.ahead`: the
// AVX-512 kernels, on rows of whole bytes or 4-bit codes per element.
bool PrefetchesAhead(const CodeRows& run, int64_t d);

// The first byte of the run's rows (its element `first`, which starts a byte).
const void* RunBytes(const CodeRows& run);

// Element (t, d) of a run as FLOAT (the reference the kernels are tested against).
float CodeValue(const CodeRows& run, int64_t t, int64_t d, int64_t width);

// For g < heads and the rows of runs[0..runs) in order (column `at` of s for row t of run r
// is the sum of the earlier runs' rows plus t): s[g * s_stride + at] = the dot of query
// q + g * q_stride with that row's values over d elements.
void GroupCodeDots(const float* q, int64_t q_stride, int64_t heads, const CodeRows* runs, int nruns,
                   int64_t d, float* s, int64_t s_stride, VecPath path = VecPath::kAuto);

// For g < heads: y[g * y_stride + j] = y[g * y_stride + j] * rescale[g] + the sum over the
// rows of the runs (weights w[g * w_stride + at], at counted as above) of weight * value(t, j),
// for j < d. rescale null: 1. The weights are scaled in place by their run's scale (w is the
// caller's scratch: softmax weights no longer needed once summed).
void GroupCodeWeightedRowSums(float* w, int64_t w_stride, int64_t heads, const CodeRows* runs,
                              int nruns, int64_t d, const float* rescale, float* y,
                              int64_t y_stride, VecPath path = VecPath::kAuto);

}  // namespace onnx_light::ops::math
