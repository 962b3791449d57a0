#include "ops/math/rowops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/math/gemm.h"
#include "ops/math/vexp.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define OL_HAVE_X86 1
#endif

namespace onnx_light::ops::math {

namespace {

// ---- portable (any T) ----

template <typename T>
void SoftmaxRowPortable(const T* x, T* y, int64_t n, bool log_softmax) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) max = x[i];
  double sum = 0;
  if (log_softmax) {
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
    const T log_sum = static_cast<T>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - max - log_sum;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(x[i] - max);
      sum += y[i];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

template <typename T>
void LayerNormRowPortable(const T* x, const T* scale, const T* bias, T* y, int64_t n, T eps,
                          T* mean_out, T* inv_out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const T mean = static_cast<T>(sum / static_cast<double>(n));
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(x[i] - mean) * (x[i] - mean);
  const T inv = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    const T v = (x[i] - mean) * inv * scale[i];
    y[i] = bias ? v + bias[i] : v;
  }
  if (mean_out) *mean_out = mean;
  if (inv_out) *inv_out = inv;
}

template <typename T>
void RmsNormRowPortable(const T* x, const T* scale, T* y, int64_t n, T eps, T* inv_out) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  const T inv = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * scale[i];
  if (inv_out) *inv_out = inv;
}

// ---- AVX2/FMA (float) ----
#ifdef OL_HAVE_X86
#define OL_AVX2 __attribute__((target("avx2,fma")))

OL_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Maximum of a row; NaN when the row holds one (maxps alone would drop it). Two
// accumulators, so that maxps's latency does not serialise the loop.
OL_AVX2 float RowMaxAvx2(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf, nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    m0 = _mm256_max_ps(m0, v0);
    m1 = _mm256_max_ps(m1, v1);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    m0 = _mm256_max_ps(m0, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan)) return std::numeric_limits<float>::quiet_NaN();
  const __m256 vmax = _mm256_max_ps(m0, m1);
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  float max = _mm_cvtss_f32(s);
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    max = std::max(max, x[i]);
  }
  return max;
}

// y[i] *= s (softmax's normalisation).
OL_AVX2 void ScaleAvx2(float* y, int64_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vs));
  for (; i < n; ++i) y[i] *= s;
}

// y[i] = (x[i] - a) - b (log-softmax: a = max, b = log(sum)).
OL_AVX2 void SubSubAvx2(const float* x, float* y, int64_t n, float a, float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), va), vb));
  for (; i < n; ++i) y[i] = (x[i] - a) - b;
}

OL_AVX2 float SumAvx2(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  float s = HSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i];
  return s;
}

// sum((x - c)^2)
OL_AVX2 float SumSqAvx2(const float* x, int64_t n, float c) {
  const __m256 vc = _mm256_set1_ps(c);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc);
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vc);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc);
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  float s = HSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

OL_AVX2 void LayerNormRowAvx2(const float* x, const float* scale, const float* bias, float* y,
                              int64_t n, float eps, float* mean_out, float* inv_out) {
  const float mean = SumAvx2(x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(SumSqAvx2(x, n, mean) / static_cast<float>(n) + eps);
  const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi),
                             _mm256_loadu_ps(scale + i));
    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) {
    const float v = (x[i] - mean) * inv * scale[i];
    y[i] = bias ? v + bias[i] : v;
  }
  if (mean_out) *mean_out = mean;
  if (inv_out) *inv_out = inv;
}

OL_AVX2 void RmsNormRowAvx2(const float* x, const float* scale, float* y, int64_t n, float eps,
                            float* inv_out) {
  const float inv = 1.0f / std::sqrt(SumSqAvx2(x, n, 0.0f) / static_cast<float>(n) + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi),
                                          _mm256_loadu_ps(scale + i)));
  for (; i < n; ++i) y[i] = x[i] * inv * scale[i];
  if (inv_out) *inv_out = inv;
}
#endif  // OL_HAVE_X86

bool UseAvx2(bool simd) {
#ifdef OL_HAVE_X86
  return simd && CpuHasAvx2Fma();
#else
  (void)simd;
  return false;
#endif
}

float RowMax(const float* x, int64_t n, bool simd) {
#ifdef OL_HAVE_X86
  if (UseAvx2(simd)) return RowMaxAvx2(x, n);
#endif
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    max = std::max(max, x[i]);
  }
  return max;
}

}  // namespace

// max, then y = e^(x - max) with its sum from the vector exp, then the scaling.
void SoftmaxRow(const float* x, float* y, int64_t n, bool log_softmax, bool simd) {
  const float max = RowMax(x, n, simd);
  if (std::isnan(max)) {  // a NaN poisons its row
    std::fill(y, y + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const double sum = VecExpShiftSum(x, max, y, n, simd ? VecPath::kAuto : VecPath::kPortable);
  if (log_softmax) {
    const float log_sum = static_cast<float>(std::log(sum));
#ifdef OL_HAVE_X86
    if (UseAvx2(simd)) return SubSubAvx2(x, y, n, max, log_sum);
#endif
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - max) - log_sum;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
#ifdef OL_HAVE_X86
    if (UseAvx2(simd)) return ScaleAvx2(y, n, inv);
#endif
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}
void SoftmaxRow(const double* x, double* y, int64_t n, bool log_softmax, bool) {
  SoftmaxRowPortable(x, y, n, log_softmax);
}

void LayerNormRow(const float* x, const float* scale, const float* bias, float* y, int64_t n,
                  float epsilon, float* mean, float* inv_std, bool simd) {
#ifdef OL_HAVE_X86
  if (UseAvx2(simd)) return LayerNormRowAvx2(x, scale, bias, y, n, epsilon, mean, inv_std);
#endif
  LayerNormRowPortable(x, scale, bias, y, n, epsilon, mean, inv_std);
}
void LayerNormRow(const double* x, const double* scale, const double* bias, double* y, int64_t n,
                  double epsilon, double* mean, double* inv_std, bool) {
  LayerNormRowPortable(x, scale, bias, y, n, epsilon, mean, inv_std);
}

void RmsNormRow(const float* x, const float* scale, float* y, int64_t n, float epsilon,
                float* inv_rms, bool simd) {
#ifdef OL_HAVE_X86
  if (UseAvx2(simd)) return RmsNormRowAvx2(x, scale, y, n, epsilon, inv_rms);
#endif
  RmsNormRowPortable(x, scale, y, n, epsilon, inv_rms);
}
void RmsNormRow(const double* x, const double* scale, double* y, int64_t n, double epsilon,
                double* inv_rms, bool) {
  RmsNormRowPortable(x, scale, y, n, epsilon, inv_rms);
}

}  // namespace onnx_light::ops::math
