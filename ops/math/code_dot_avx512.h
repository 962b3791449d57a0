// AVX-512F forms of math::GroupCodeDots / GroupCodeWeightedRowSums' inner kernels
// (code_dot.cc dispatches here when the CPU has AVX-512F and the width is a multiple of 16):
// 16 elements per register, so each chunk of a row is widened once per 16 columns instead of
// 8 and the query heads of a group share it. 8-bit and dense rows are widened as the AVX2
// kernels widen them (the zero point subtracted in registers for keys); packed 4/2-bit codes
// are shifted into place per lane and looked up in a 16-entry table of (code - zero) with one
// permute (4-bit chunks with their lanes interleaved, the query and the sums' accumulators
// laid out to match). Dots of four rows and four heads are summed by one transposing tree.
// For values the scales multiply the weights and the zero points are folded out of the sums,
// so results agree with the AVX2 kernels to a few FLOAT ulps of the sums.
#pragma once

#include <cstdint>

#include "ops/math/code_dot.h"

namespace onnx_light::ops::math {

// s[g * s_stride + at] = run.scale * sum_j q[g * q_stride + j] * (code(t, j) - run.zero) for
// g < heads (1..4) and the rows of runs[0..n) (one code; at counts the rows of the runs in
// order); d a multiple of 16, packed rows starting on a byte.
void CodeDotsAvx512(const float* q, int64_t q_stride, int64_t heads, const CodeRows* runs, int n,
                    int64_t d, float* s, int64_t s_stride);

// y[g * y_stride + j] = y[g * y_stride + j] * rescale[g] + the sum over the rows of
// runs[0..n) (one code) of ws[g * w_stride + at] * value(t, j), for g < heads (1..4), j < d (a
// multiple of 16); rescale null: 1. The weights are scaled in place by their run's scale (as
// math::GroupCodeWeightedRowSums documents), unless `prepared`: weights already scaled and
// zero points already folded out by the caller.
void CodeSumsAvx512(float* ws, int64_t w_stride, int64_t heads, const CodeRows* runs, int n,
                    int64_t d, const float* rescale, float* y, int64_t y_stride,
                    bool prepared = false);

}  // namespace onnx_light::ops::math
