// AVX-512F forms of math::GroupCodeDots / GroupCodeWeightedRowSums' inner kernels
// (code_dot.cc dispatches here when the CPU has AVX-512F and the width is a multiple of 16):
// 16 elements per register, so each chunk of a row is widened once per 16 columns instead of
// 8 and the query heads of a group share it. Same arithmetic as the AVX2 kernels (the zero
// point subtracted in registers for keys; for values the caller folds it out and scales the
// weights), so results agree with them to a few FLOAT ulps of the sums.
#pragma once

#include <cstdint>

#include "ops/math/code_dot.h"

namespace onnx_light::ops::math {

// s[g * s_stride + t] = run.scale * sum_j q[g * q_stride + j] * (code(t, j) - run.zero) for
// g < heads (1..4) and the run's rows; d a multiple of 16, packed rows starting on a byte.
void CodeDotsAvx512(const float* q, int64_t q_stride, int64_t heads, const CodeRows& run, int64_t d,
                    float* s, int64_t s_stride);

// y[g * y_stride + j] += sum over the rows of runs[0..n) (one code) of ws[g * w_stride + at] *
// code(t, j), for g < heads (1..4), j < d (a multiple of 16): weights already scaled, zero
// points already folded out by the caller.
void CodeSumsAvx512(const float* ws, int64_t w_stride, int64_t heads, const CodeRows* runs, int n,
                    int64_t d, float* y, int64_t y_stride);

}  // namespace onnx_light::ops::math
