// Short float vector primitives for kernels that work row by row (attention): a dot
// product and y += alpha * x, AVX2/FMA when the CPU has it (chosen at run time), else
// portable loops the compiler vectorises.
#pragma once

#include <cstdint>

namespace onnx_light::ops::math {

float Dot(const float* a, const float* b, int64_t n);
// out[r] = a . b[r] for four rows b[0..3] of length n (a is read once).
void Dot4(const float* a, const float* const b[4], int64_t n, float out[4]);
void Axpy(float alpha, const float* x, float* y, int64_t n);
// y[0..n) += sum over t < rows of w[t] * x[t * x_stride + 0..n): the weighted sum of rows,
// with y's chunk held in registers over all rows (one store per chunk, not one per row).
void WeightedRowSum(const float* w, int64_t rows, const float* x, int64_t x_stride, float* y,
                    int64_t n);

// Grouped-query attention's decode step: several query heads share one KV head's rows.
// s[g * s_stride + t] = q[g * q_stride + 0..d) . k[t * k_stride + 0..d) for g < heads and
// t < keys: each pass loads four key rows once for up to three heads.
void GroupDots(const float* q, int64_t q_stride, int64_t heads, const float* k, int64_t k_stride,
               int64_t keys, int64_t d, float* s, int64_t s_stride);
// y[g * y_stride + 0..n) += sum over t < rows of w[g * w_stride + t] * x[t * x_stride + 0..n)
// for g < heads: each pass loads a value row's chunk once for two heads, the outputs'
// chunks held in registers over all rows.
void GroupWeightedRowSums(const float* w, int64_t w_stride, int64_t heads, const float* x,
                          int64_t x_stride, int64_t rows, float* y, int64_t y_stride, int64_t n);
// The same over rows lying in `runs` separate runs (pages): run r has rows[r] rows from x[r]
// (stride x_stride), and w's columns follow the runs in order.
void GroupWeightedRowSums(const float* w, int64_t w_stride, int64_t heads, const float* const* x,
                          const int64_t* rows, int runs, int64_t x_stride, float* y,
                          int64_t y_stride, int64_t n);
// s[t] = s[t] * scale + bias[t] (bias null: no bias), exactly -inf where bias[t] is -inf;
// returns the maximum of the results (-inf when n is 0), NaN when one is NaN.
float ScaleAddMax(float* s, int64_t n, float scale, const float* bias);

// The larger of a and b, NaN when either is (std::max keeps its first operand against a
// NaN): the running maximum of an online softmax, where one NaN score makes the row NaN as
// ONNX Softmax does.
inline float NanMax(float a, float b) { return a != a || b != b ? a + b : (a < b ? b : a); }

// Whether an online softmax's running maximum `max` must move to a block's `block_max`:
// when it is larger, or when either is NaN (the rescale then carries the NaN into the sum
// and the output).
inline bool MaxMoves(float block_max, float max) { return !(block_max <= max); }

}  // namespace onnx_light::ops::math
