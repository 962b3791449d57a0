#include "ops/math/half_convert.h"

#include "core/dtype.h"
#include "ops/math/cpu_features.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

namespace {

#if defined(__x86_64__)
#define OL_F16C __attribute__((target("avx2,fma,f16c")))

OL_F16C void HalvesToFloatsF16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = core::HalfToFloat(src[i]);
}

OL_F16C void FloatsToHalvesF16c(const float* src, uint16_t* dst, int64_t n) {
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x7e00));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan) != 0) {  // the canonical NaN of the sign (sign bit >> 16)
      const __m256i fixed = _mm256_srli_epi32(
          _mm256_castps_si256(
              _mm256_or_ps(_mm256_and_ps(x, sign),
                           _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(quiet), 16)))),
          16);
      const __m256i wide =
          _mm256_blendv_epi8(_mm256_cvtepu16_epi32(h), fixed, _mm256_castps_si256(nan));
      h = _mm_packus_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = core::FloatToHalf(src[i]);
}
#endif

}  // namespace

void HalvesToFloats(const uint16_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2FmaF16c()) return HalvesToFloatsF16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = core::HalfToFloat(src[i]);
}

void FloatsToHalves(const float* src, uint16_t* dst, int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2FmaF16c()) return FloatsToHalvesF16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = core::FloatToHalf(src[i]);
}

}  // namespace onnx_light::ops::math
