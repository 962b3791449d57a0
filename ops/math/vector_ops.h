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

}  // namespace onnx_light::ops::math
