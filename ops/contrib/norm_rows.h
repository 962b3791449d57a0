// The row normalisation shared by the contrib layer norms (SimplifiedLayerNormalization,
// SkipLayerNormalization, SkipSimplifiedLayerNormalization). onnxruntime's CPU kernels
// (core/providers/cpu/nn/layer_norm_impl.cc, contrib_ops/cpu/skip_layer_norm.cc) sum x and
// x^2 of a row, take sqrt(mean(x^2) [- mean^2] + epsilon) and divide each element by it, then
// multiply by gamma (and add beta). Same order here; the sums are kept in double, so float
// results agree with theirs to rounding.
#pragma once

#include <cmath>
#include <cstdint>

namespace onnx_light::ops::contrib {

struct RowStats {
  float mean = 0.0f;     // 0 for the simplified (RMS) form
  float inv_std = 0.0f;  // 1 / sqrt(variance or mean square + epsilon)
};

// y = (x - mean) / std * gamma [+ beta], or x / rms * gamma when `simplified`. y may be x.
inline RowStats NormalizeRow(const float* x, int64_t n, const float* gamma, const float* beta,
                             float epsilon, bool simplified, float* y) {
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    sum += x[j];
    sum_sq += static_cast<double>(x[j]) * x[j];
  }
  const double mean = simplified ? 0.0 : sum / static_cast<double>(n);
  const double var = sum_sq / static_cast<double>(n) - mean * mean;
  const float denom = static_cast<float>(std::sqrt(var + static_cast<double>(epsilon)));
  const float m = static_cast<float>(mean);
  for (int64_t j = 0; j < n; ++j) {
    const float v = (x[j] - m) / denom * gamma[j];
    y[j] = beta != nullptr ? v + beta[j] : v;
  }
  return {m, 1.0f / denom};
}

}  // namespace onnx_light::ops::contrib
