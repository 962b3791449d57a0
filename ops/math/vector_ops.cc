#include "ops/math/vector_ops.h"

#include <algorithm>
#include <limits>

#include "ops/math/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace onnx_light::ops::math {

namespace {

constexpr float kNegInfinity = -std::numeric_limits<float>::infinity();

float DotPortable(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void Dot4Portable(const float* a, const float* const b[4], int64_t n, float out[4]) {
  for (int r = 0; r < 4; ++r) out[r] = DotPortable(a, b[r], n);
}

void AxpyPortable(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void WeightedRowSumPortable(const float* w, int64_t rows, const float* x, int64_t x_stride,
                            float* y, int64_t n) {
  for (int64_t t = 0; t < rows; ++t) AxpyPortable(w[t], x + t * x_stride, y, n);
}

void GroupDotsPortable(const float* q, int64_t q_stride, int64_t heads, const float* k,
                       int64_t k_stride, int64_t keys, int64_t d, float* s, int64_t s_stride) {
  for (int64_t g = 0; g < heads; ++g)
    for (int64_t t = 0; t < keys; ++t)
      s[g * s_stride + t] = DotPortable(q + g * q_stride, k + t * k_stride, d);
}

void GroupWeightedRowSumsPortable(const float* w, int64_t w_stride, int64_t heads, const float* x,
                                  int64_t x_stride, int64_t rows, float* y, int64_t y_stride,
                                  int64_t n) {
  for (int64_t g = 0; g < heads; ++g)
    WeightedRowSumPortable(w + g * w_stride, rows, x, x_stride, y + g * y_stride, n);
}

float ScaleAddMaxPortable(float* s, int64_t n, float scale, const float* bias) {
  float max = kNegInfinity;
  for (int64_t t = 0; t < n; ++t) {
    const float b = bias ? bias[t] : 0.0f;
    s[t] = b == kNegInfinity ? kNegInfinity : s[t] * scale + b;
    max = NanMax(max, s[t]);
  }
  return max;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  float s = _mm_cvtss_f32(lo);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

__attribute__((target("avx2,fma"))) void Dot4Avx2(const float* a, const float* const b[4],
                                                  int64_t n, float out[4]) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i);
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b[r] + i), acc[r]);
  }
  // Horizontal sums of the four accumulators at once.
  const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 s = _mm256_hadd_ps(s01, s23);
  const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  _mm_storeu_ps(out, sum);
  for (; i < n; ++i)
    for (int r = 0; r < 4; ++r) out[r] += a[i] * b[r][i];
}

// Four key rows against G query heads: 4G accumulators, the rows loaded once per chunk.
template <int G>
__attribute__((target("avx2,fma"))) inline void Dots4Avx2(const float* q, int64_t q_stride,
                                                          const float* k, int64_t k_stride,
                                                          int64_t d, float* s, int64_t s_stride) {
  __m256 acc[G][4];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < 4; ++r) acc[g][r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + k_stride + i);
    const __m256 k2 = _mm256_loadu_ps(k + 2 * k_stride + i);
    const __m256 k3 = _mm256_loadu_ps(k + 3 * k_stride + i);
    for (int g = 0; g < G; ++g) {
      const __m256 qv = _mm256_loadu_ps(q + g * q_stride + i);
      acc[g][0] = _mm256_fmadd_ps(qv, k0, acc[g][0]);
      acc[g][1] = _mm256_fmadd_ps(qv, k1, acc[g][1]);
      acc[g][2] = _mm256_fmadd_ps(qv, k2, acc[g][2]);
      acc[g][3] = _mm256_fmadd_ps(qv, k3, acc[g][3]);
    }
  }
  for (int g = 0; g < G; ++g) {  // the four horizontal sums of one head at once
    const __m256 s01 = _mm256_hadd_ps(acc[g][0], acc[g][1]);
    const __m256 s23 = _mm256_hadd_ps(acc[g][2], acc[g][3]);
    const __m256 h = _mm256_hadd_ps(s01, s23);
    _mm_storeu_ps(s + g * s_stride,
                  _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
}

template <int G>
__attribute__((target("avx2,fma"))) void GroupDotsPass(const float* q, int64_t q_stride,
                                                       const float* k, int64_t k_stride,
                                                       int64_t keys, int64_t d, float* s,
                                                       int64_t s_stride) {
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4)
    Dots4Avx2<G>(q, q_stride, k + t * k_stride, k_stride, d, s + t, s_stride);
  for (; t < keys; ++t)
    for (int g = 0; g < G; ++g)
      s[g * s_stride + t] = DotAvx2(q + g * q_stride, k + t * k_stride, d);
}

void GroupDotsAvx2(const float* q, int64_t q_stride, int64_t heads, const float* k,
                   int64_t k_stride, int64_t keys, int64_t d, float* s, int64_t s_stride) {
  int64_t g = 0;
  for (; g + 3 <= heads; g += 3)
    GroupDotsPass<3>(q + g * q_stride, q_stride, k, k_stride, keys, d, s + g * s_stride, s_stride);
  if (heads - g == 2)
    GroupDotsPass<2>(q + g * q_stride, q_stride, k, k_stride, keys, d, s + g * s_stride, s_stride);
  else if (heads - g == 1)
    GroupDotsPass<1>(q + g * q_stride, q_stride, k, k_stride, keys, d, s + g * s_stride, s_stride);
}

// Two heads' 32-column output chunks in eight registers over every row of x.
__attribute__((target("avx2,fma"))) void WeightedRowSums2Avx2(const float* w0, const float* w1,
                                                              int64_t rows, const float* x,
                                                              int64_t x_stride, float* y0,
                                                              float* y1) {
  __m256 a[4], b[4];
  for (int c = 0; c < 4; ++c) {
    a[c] = _mm256_loadu_ps(y0 + 8 * c);
    b[c] = _mm256_loadu_ps(y1 + 8 * c);
  }
  for (int64_t t = 0; t < rows; ++t) {
    const float* r = x + t * x_stride;
    const __m256 u = _mm256_broadcast_ss(w0 + t), v = _mm256_broadcast_ss(w1 + t);
    for (int c = 0; c < 4; ++c) {
      const __m256 xv = _mm256_loadu_ps(r + 8 * c);
      a[c] = _mm256_fmadd_ps(u, xv, a[c]);
      b[c] = _mm256_fmadd_ps(v, xv, b[c]);
    }
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(y0 + 8 * c, a[c]);
    _mm256_storeu_ps(y1 + 8 * c, b[c]);
  }
}

// One or two heads' 32-column output chunks in registers over rows in several runs (pages).
template <int kHeads>
__attribute__((target("avx2,fma"))) void WeightedRowSumsRunsAvx2(const float* const w[kHeads],
                                                                 const float* const* x,
                                                                 const int64_t* rows, int runs,
                                                                 int64_t x_stride, int64_t col,
                                                                 float* const y[kHeads]) {
  __m256 acc[kHeads][4];
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < 4; ++c) acc[h][c] = _mm256_loadu_ps(y[h] + col + 8 * c);
  int64_t t0 = 0;
  for (int r = 0; r < runs; t0 += rows[r++]) {
    for (int64_t t = 0; t < rows[r]; ++t) {
      const float* row = x[r] + t * x_stride + col;
      __m256 wt[kHeads];
      for (int h = 0; h < kHeads; ++h) wt[h] = _mm256_broadcast_ss(w[h] + t0 + t);
      for (int c = 0; c < 4; ++c) {
        const __m256 xv = _mm256_loadu_ps(row + 8 * c);
        for (int h = 0; h < kHeads; ++h) acc[h][c] = _mm256_fmadd_ps(wt[h], xv, acc[h][c]);
      }
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y[h] + col + 8 * c, acc[h][c]);
}

__attribute__((target("avx2,fma"))) float ScaleAddMaxAvx2(float* s, int64_t n, float scale,
                                                          const float* bias) {
  const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(kNegInfinity);
  __m256 vmax = ninf, nan = _mm256_setzero_ps();  // lanes that met a NaN (max_ps drops them)
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + t), vs);
    if (bias != nullptr) {
      const __m256 b = _mm256_loadu_ps(bias + t);
      x = _mm256_blendv_ps(_mm256_add_ps(x, b), ninf, _mm256_cmp_ps(b, ninf, _CMP_EQ_OQ));
    }
    _mm256_storeu_ps(s + t, x);
    vmax = _mm256_max_ps(vmax, x);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan) != 0) {
    ScaleAddMaxPortable(s + t, n - t, scale, bias ? bias + t : nullptr);
    return std::numeric_limits<float>::quiet_NaN();
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float head = _mm_cvtss_f32(m);
  const float tail = ScaleAddMaxPortable(s + t, n - t, scale, bias ? bias + t : nullptr);
  return NanMax(head, tail);
}

__attribute__((target("avx2,fma"))) void AxpyAvx2(float alpha, const float* x, float* y,
                                                  int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif

}  // namespace

float Dot(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return DotAvx2(a, b, n);
#endif
  return DotPortable(a, b, n);
}

#if defined(__x86_64__)
// Chunks of 32 columns in four accumulators over every row, then 8, then the tail.
__attribute__((target("avx2,fma"))) void WeightedRowSumAvx2(const float* w, int64_t rows,
                                                            const float* x, int64_t x_stride,
                                                            float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    __m256 a0 = _mm256_loadu_ps(y + j), a1 = _mm256_loadu_ps(y + j + 8);
    __m256 a2 = _mm256_loadu_ps(y + j + 16), a3 = _mm256_loadu_ps(y + j + 24);
    for (int64_t t = 0; t < rows; ++t) {
      const __m256 wt = _mm256_broadcast_ss(w + t);
      const float* r = x + t * x_stride + j;
      a0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r), a0);
      a1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 8), a1);
      a2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 16), a2);
      a3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(r + 24), a3);
    }
    _mm256_storeu_ps(y + j, a0);
    _mm256_storeu_ps(y + j + 8, a1);
    _mm256_storeu_ps(y + j + 16, a2);
    _mm256_storeu_ps(y + j + 24, a3);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a = _mm256_loadu_ps(y + j);
    for (int64_t t = 0; t < rows; ++t)
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + t), _mm256_loadu_ps(x + t * x_stride + j), a);
    _mm256_storeu_ps(y + j, a);
  }
  if (j < n) WeightedRowSumPortable(w, rows, x + j, x_stride, y + j, n - j);
}
#endif

void Dot4(const float* a, const float* const b[4], int64_t n, float out[4]) {
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return Dot4Avx2(a, b, n, out);
#endif
  Dot4Portable(a, b, n, out);
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return AxpyAvx2(alpha, x, y, n);
#endif
  AxpyPortable(alpha, x, y, n);
}

void WeightedRowSum(const float* w, int64_t rows, const float* x, int64_t x_stride, float* y,
                    int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return WeightedRowSumAvx2(w, rows, x, x_stride, y, n);
#endif
  WeightedRowSumPortable(w, rows, x, x_stride, y, n);
}

void GroupDots(const float* q, int64_t q_stride, int64_t heads, const float* k, int64_t k_stride,
               int64_t keys, int64_t d, float* s, int64_t s_stride) {
#if defined(__x86_64__)
  if (d % 8 == 0 && CpuHasAvx2Fma())
    return GroupDotsAvx2(q, q_stride, heads, k, k_stride, keys, d, s, s_stride);
#endif
  GroupDotsPortable(q, q_stride, heads, k, k_stride, keys, d, s, s_stride);
}

void GroupWeightedRowSums(const float* w, int64_t w_stride, int64_t heads, const float* x,
                          int64_t x_stride, int64_t rows, float* y, int64_t y_stride, int64_t n) {
#if defined(__x86_64__)
  if (n % 32 == 0 && CpuHasAvx2Fma()) {
    int64_t g = 0;
    for (; g + 2 <= heads; g += 2)
      for (int64_t j = 0; j < n; j += 32)
        WeightedRowSums2Avx2(w + g * w_stride, w + (g + 1) * w_stride, rows, x + j, x_stride,
                             y + g * y_stride + j, y + (g + 1) * y_stride + j);
    if (g < heads) WeightedRowSumAvx2(w + g * w_stride, rows, x, x_stride, y + g * y_stride, n);
    return;
  }
#endif
  GroupWeightedRowSumsPortable(w, w_stride, heads, x, x_stride, rows, y, y_stride, n);
}

void GroupWeightedRowSums(const float* w, int64_t w_stride, int64_t heads, const float* const* x,
                          const int64_t* rows, int runs, int64_t x_stride, float* y,
                          int64_t y_stride, int64_t n) {
#if defined(__x86_64__)
  if (n % 32 == 0 && CpuHasAvx2Fma()) {
    int64_t g = 0;
    for (; g + 2 <= heads; g += 2) {
      const float* wg[2] = {w + g * w_stride, w + (g + 1) * w_stride};
      float* yg[2] = {y + g * y_stride, y + (g + 1) * y_stride};
      for (int64_t j = 0; j < n; j += 32)
        WeightedRowSumsRunsAvx2<2>(wg, x, rows, runs, x_stride, j, yg);
    }
    if (g < heads) {
      const float* wg[1] = {w + g * w_stride};
      float* yg[1] = {y + g * y_stride};
      for (int64_t j = 0; j < n; j += 32)
        WeightedRowSumsRunsAvx2<1>(wg, x, rows, runs, x_stride, j, yg);
    }
    return;
  }
#endif
  int64_t t0 = 0;
  for (int r = 0; r < runs; t0 += rows[r++])
    GroupWeightedRowSumsPortable(w + t0, w_stride, heads, x[r], x_stride, rows[r], y, y_stride, n);
}

float ScaleAddMax(float* s, int64_t n, float scale, const float* bias) {
#if defined(__x86_64__)
  if (CpuHasAvx2Fma()) return ScaleAddMaxAvx2(s, n, scale, bias);
#endif
  return ScaleAddMaxPortable(s, n, scale, bias);
}

}  // namespace onnx_light::ops::math
