#include "ops/math/vector_ops.h"

#include "ops/math/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace onnx_light::ops::math {

namespace {

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

}  // namespace onnx_light::ops::math
