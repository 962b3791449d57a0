// Row kernels shared by Softmax, LogSoftmax, LayerNormalization and RMSNormalization.
// FLOAT rows run an AVX2/FMA version when the CPU has it (softmax takes its exp from the
// vector exp of ops/math/vexp.h); `simd = false` forces the portable version so that tests
// cover both. DOUBLE rows use the portable template.
#pragma once

#include <cstdint>

namespace onnx_light::ops::math {

// Softmax (or log-softmax) of one contiguous row: y = exp(x - max) / sum (log: x - max -
// log(sum)), the sum accumulated in double. A row holding a NaN gives NaN throughout. y must
// not overlap x.
void SoftmaxRow(const float* x, float* y, int64_t n, bool log_softmax, bool simd = true);
void SoftmaxRow(const double* x, double* y, int64_t n, bool log_softmax, bool simd = true);

// y = (x - mean) * inv_std * scale + bias over one row of n; bias may be null.
// Writes the row's mean and 1/sqrt(var + eps) to *mean and *inv_std (either may be null).
void LayerNormRow(const float* x, const float* scale, const float* bias, float* y, int64_t n,
                  float epsilon, float* mean, float* inv_std, bool simd = true);
void LayerNormRow(const double* x, const double* scale, const double* bias, double* y, int64_t n,
                  double epsilon, double* mean, double* inv_std, bool simd = true);

// y = x / sqrt(mean(x^2) + eps) * scale over one row of n; *inv_rms gets the factor.
void RmsNormRow(const float* x, const float* scale, float* y, int64_t n, float epsilon,
                float* inv_rms, bool simd = true);
void RmsNormRow(const double* x, const double* scale, double* y, int64_t n, double epsilon,
                double* inv_rms, bool simd = true);

}  // namespace onnx_light::ops::math
