#include "ops/math/rowops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/math/gemm.h"

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

// Cephes-style expf: e^x = 2^k * e^r with |r| <= ln2/2 and a degree-6 polynomial.
OL_AVX2 inline __m256 Exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283905206835f);  // ln(FLT_MAX)
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^k built in two halves so that k = 128 (x near 88.37) does not overflow the exponent.
  const __m256i k = _mm256_cvtps_epi32(fx);
  const __m256i k1 = _mm256_srai_epi32(k, 1);
  const __m256i k2 = _mm256_sub_epi32(k, k1);
  const __m256 s1 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  // Outside the range: 0 below, +inf above; NaN stays NaN.
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  result = _mm256_blendv_ps(result, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                            _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

OL_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

OL_AVX2 inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Loads the first `n` (< 8) floats, the rest `fill`.
OL_AVX2 inline __m256 LoadPartial(const float* p, int64_t n, float fill) {
  alignas(32) float buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = i < n ? p[i] : fill;
  return _mm256_load_ps(buf);
}
OL_AVX2 inline void StorePartial(float* p, __m256 v, int64_t n) {
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

OL_AVX2 void ExpRowAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Exp8(_mm256_loadu_ps(x + i)));
  if (i < n) StorePartial(y + i, Exp8(LoadPartial(x + i, n - i, 0.0f)), n - i);
}

OL_AVX2 void SoftmaxRowAvx2(const float* x, float* y, int64_t n, bool log_softmax) {
  const float ninf = -std::numeric_limits<float>::infinity();
  __m256 vmax = _mm256_set1_ps(ninf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = HMax(vmax);
  for (; i < n; ++i) max = std::max(max, x[i]);
  const __m256 m = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  i = 0;
  if (log_softmax) {
    for (; i + 8 <= n; i += 8)
      acc = _mm256_add_ps(acc, Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)));
    if (i < n)
      acc = _mm256_add_ps(acc, Exp8(_mm256_sub_ps(LoadPartial(x + i, n - i, ninf), m)));
    const float shift = max + std::log(HSum(acc));
    const __m256 vshift = _mm256_set1_ps(shift);
    for (i = 0; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), vshift));
    for (; i < n; ++i) y[i] = x[i] - shift;
    return;
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256 e = Exp8(_mm256_sub_ps(LoadPartial(x + i, n - i, ninf), m));
    StorePartial(y + i, e, n - i);
    acc = _mm256_add_ps(acc, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / HSum(acc));
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  for (; i < n; ++i) y[i] *= _mm256_cvtss_f32(inv);
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

bool HasNan(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return true;
  return false;
}

}  // namespace

void ExpRow(const float* x, float* y, int64_t n, bool simd) {
#ifdef OL_HAVE_X86
  if (UseAvx2(simd)) return ExpRowAvx2(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void SoftmaxRow(const float* x, float* y, int64_t n, bool log_softmax, bool simd) {
#ifdef OL_HAVE_X86
  // _mm256_max_ps drops NaN: rows holding one take the portable path (NaN everywhere).
  if (UseAvx2(simd) && !HasNan(x, n)) return SoftmaxRowAvx2(x, y, n, log_softmax);
#endif
  SoftmaxRowPortable(x, y, n, log_softmax);
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
void LayerNormRow(const double* x, const double* scale, const double* bias, double* y,
                  int64_t n, double epsilon, double* mean, double* inv_std, bool) {
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
