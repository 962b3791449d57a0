#include "ops/math/vexp.h"

#include <algorithm>
#include <cmath>

#include "ops/math/cpu_features.h"

#if defined(__x86_64__)
#include "ops/math/x86_intrinsics.h"
#define OL_HAVE_X86 1
#endif

namespace onnx_light::ops::math {

namespace {

// ---- portable: libm, one element at a time ----

float SigmoidScalar(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

// ---- the vector algorithm (same constants and operation order for AVX2 and AVX-512, so
// both give bit-identical results) ----
//
// e^x = 2^k * e^r with k = round(x / ln2) and r = x - k ln2 (|r| <= ln2/2), ln2 split in
// two (hi has 9 significant bits, so x - k*hi is exact); e^r = 1 + r*q(r) with q the Taylor
// polynomial of (e^r - 1)/r to degree 6 (truncation ~5e-9) and the last step one FMA, which
// keeps the total near 1 ulp. 2^k is applied as two factors 2^(k/2) so that k from -150 to
// 128 needs no special case: results overflow to inf and underflow through the subnormals
// to 0 by the multiplications' own rounding. x is clamped to [-104, 89] first, beyond
// which e^x is 0 or inf anyway; the clamp is written max(lo, x), min(hi, .) because
// min/max return their second operand for NaN, so NaN passes through to the result.
constexpr float kExpLo = -104.0f;
constexpr float kExpHi = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kQ[7] = {1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
// tanh(|x|) = |x| + |x|^3 P(x^2) for |x| < kTanhSmall (Cephes tanhf), (1 - e)/(1 + e)
// with e = e^(-2|x|) above, computed as 1 - 2e/(1 + e) (the better of the two in float);
// x's sign bit is put back last, so that -0 stays -0.
constexpr float kTanhSmall = 0.625f;
constexpr float kTanhP[5] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f,
                             2.06390887954e-2f, -5.70498872745e-3f};

#ifdef OL_HAVE_X86
#define OL_AVX2 __attribute__((target("avx2,fma")))
#define OL_AVX512 __attribute__((target("avx512f,avx2,fma")))

// ---- AVX2/FMA: 8 lanes ----

OL_AVX2 inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(kExpHi), _mm256_max_ps(_mm256_set1_ps(kExpLo), x));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  __m256 q = _mm256_set1_ps(kQ[6]);
  for (int i = 5; i >= 0; --i) q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(kQ[i]));
  const __m256 p = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(ki, 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// e = e^-|x|, then e/(1+e) for negative x and 1/(1+e) otherwise: no overflow, and small
// results keep their relative accuracy (no 1 - tiny cancellation).
OL_AVX2 inline __m256 Sigmoid8(__m256 x) {
  const __m256 e = Exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
  const __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, x);  // by x's sign bit
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

OL_AVX2 inline __m256 Tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 e = Exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  const __m256 big = _mm256_fnmadd_ps(_mm256_set1_ps(2.0f),
                                      _mm256_div_ps(e, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                      _mm256_set1_ps(1.0f));
  const __m256 z = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(kTanhP[4]);
  for (int i = 3; i >= 0; --i) p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kTanhP[i]));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), ax, ax);
  const __m256 abs_result =
      _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(kTanhSmall), _CMP_LT_OQ));
  return _mm256_or_ps(abs_result, _mm256_and_ps(x, sign));
}

// Lanes [0, n) set, for the last partial vector (maskload reads nothing beyond them).
OL_AVX2 inline __m256i TailMask8(int64_t n) {
  alignas(32) static const int32_t kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + 8 - n));
}

enum Fn { kExp, kSigmoid, kTanh };

template <Fn kFn>
OL_AVX2 inline __m256 Apply8(__m256 x) {
  if constexpr (kFn == kExp) return Exp8(x);
  if constexpr (kFn == kSigmoid) return Sigmoid8(x);
  if constexpr (kFn == kTanh) return Tanh8(x);
}

template <Fn kFn>
OL_AVX2 void MapAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Apply8<kFn>(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = TailMask8(n - i);
    _mm256_maskstore_ps(y + i, m, Apply8<kFn>(_mm256_maskload_ps(x + i, m)));
  }
}

// The sum is kept in double, in two accumulators (low and high halves of each vector) so
// that the additions' latency does not serialise the loop.
OL_AVX2 double ExpShiftSumAvx2(const float* x, float shift, float* y, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(y + i, e);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  if (i < n) {
    const __m256i m = TailMask8(n - i);
    // Lanes past the end are zeroed before they reach the sum.
    const __m256 e =
        _mm256_and_ps(Exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s)), _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(y + i, m, e);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const __m256d acc = _mm256_add_pd(lo, hi);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

// ---- AVX-512F: 16 lanes, the same operations (bitwise logic through the integer forms,
// which need only AVX-512F) ----

OL_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(kExpHi), _mm512_max_ps(_mm512_set1_ps(kExpLo), x));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 q = _mm512_set1_ps(kQ[6]);
  for (int i = 5; i >= 0; --i) q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(kQ[i]));
  const __m512 p = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  const __m512i ki = _mm512_cvtps_epi32(k);
  const __m512i k1 = _mm512_srai_epi32(ki, 1);
  const __m512i k2 = _mm512_sub_epi32(ki, k1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

OL_AVX512 inline __m512i SignBit16() { return _mm512_set1_epi32(INT32_MIN); }

OL_AVX512 inline __m512 Sigmoid16(__m512 x) {
  const __m512i xi = _mm512_castps_si512(x);
  const __m512 e = Exp16(_mm512_castsi512_ps(_mm512_or_epi32(xi, SignBit16())));
  const __mmask16 negative = _mm512_test_epi32_mask(xi, SignBit16());
  const __m512 num = _mm512_mask_blend_ps(negative, _mm512_set1_ps(1.0f), e);
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

OL_AVX512 inline __m512 Tanh16(__m512 x) {
  const __m512i xi = _mm512_castps_si512(x);
  const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_epi32(SignBit16(), xi));
  const __m512 e = Exp16(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  const __m512 big = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f),
                                      _mm512_div_ps(e, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                      _mm512_set1_ps(1.0f));
  const __m512 z = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(kTanhP[4]);
  for (int i = 3; i >= 0; --i) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kTanhP[i]));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), ax, ax);
  const __m512 abs_result = _mm512_mask_blend_ps(
      _mm512_cmp_ps_mask(ax, _mm512_set1_ps(kTanhSmall), _CMP_LT_OQ), big, small);
  return _mm512_castsi512_ps(
      _mm512_or_epi32(_mm512_castps_si512(abs_result), _mm512_and_epi32(xi, SignBit16())));
}

template <Fn kFn>
OL_AVX512 inline __m512 Apply16(__m512 x) {
  if constexpr (kFn == kExp) return Exp16(x);
  if constexpr (kFn == kSigmoid) return Sigmoid16(x);
  if constexpr (kFn == kTanh) return Tanh16(x);
}

template <Fn kFn>
OL_AVX512 void MapAvx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Apply16<kFn>(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, Apply16<kFn>(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// Low and high halves widened to double (the integer extract needs only AVX-512F).
OL_AVX512 inline __m512d LowHalfPd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_castsi512_si256(_mm512_castps_si512(v))));
}
OL_AVX512 inline __m512d HighHalfPd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1)));
}

OL_AVX512 double ExpShiftSumAvx512(const float* x, float shift, float* y, int64_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(y + i, e);
    lo = _mm512_add_pd(lo, LowHalfPd(e));
    hi = _mm512_add_pd(hi, HighHalfPd(e));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    // Lanes past the end are zeroed before they reach the sum.
    const __m512 e =
        _mm512_maskz_mov_ps(m, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    _mm512_mask_storeu_ps(y + i, m, e);
    lo = _mm512_add_pd(lo, LowHalfPd(e));
    hi = _mm512_add_pd(hi, HighHalfPd(e));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}
#endif  // OL_HAVE_X86

}  // namespace

VecPath ResolveVecPath(VecPath path) {
#ifdef OL_HAVE_X86
  if (path == VecPath::kPortable || !CpuHasAvx2Fma()) return VecPath::kPortable;
  if (path != VecPath::kAvx2 && CpuHasAvx512()) return VecPath::kAvx512;
  return VecPath::kAvx2;
#else
  (void)path;
  return VecPath::kPortable;
#endif
}

void VecExp(const float* x, float* y, int64_t n, VecPath path) {
#ifdef OL_HAVE_X86
  switch (ResolveVecPath(path)) {
    case VecPath::kAvx512:
      return MapAvx512<kExp>(x, y, n);
    case VecPath::kAvx2:
      return MapAvx2<kExp>(x, y, n);
    default:
      break;
  }
#else
  (void)path;
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

double VecExpShiftSum(const float* x, float shift, float* y, int64_t n, VecPath path) {
#ifdef OL_HAVE_X86
  switch (ResolveVecPath(path)) {
    case VecPath::kAvx512:
      return ExpShiftSumAvx512(x, shift, y, n);
    case VecPath::kAvx2:
      return ExpShiftSumAvx2(x, shift, y, n);
    default:
      break;
  }
#else
  (void)path;
#endif
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    sum += y[i];
  }
  return sum;
}

void VecSigmoid(const float* x, float* y, int64_t n, VecPath path) {
#ifdef OL_HAVE_X86
  switch (ResolveVecPath(path)) {
    case VecPath::kAvx512:
      return MapAvx512<kSigmoid>(x, y, n);
    case VecPath::kAvx2:
      return MapAvx2<kSigmoid>(x, y, n);
    default:
      break;
  }
#else
  (void)path;
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = SigmoidScalar(x[i]);
}

void VecTanh(const float* x, float* y, int64_t n, VecPath path) {
#ifdef OL_HAVE_X86
  switch (ResolveVecPath(path)) {
    case VecPath::kAvx512:
      return MapAvx512<kTanh>(x, y, n);
    case VecPath::kAvx2:
      return MapAvx2<kTanh>(x, y, n);
    default:
      break;
  }
#else
  (void)path;
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace onnx_light::ops::math
