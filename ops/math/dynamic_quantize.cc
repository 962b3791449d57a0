#include "ops/math/dynamic_quantize.h"

#include <algorithm>
#include <cmath>

#include "ops/math/cpu_features.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

namespace {

#if defined(__x86_64__)
#define OL_DQ512 __attribute__((target("avx512f")))

OL_DQ512 void RangeAvx512(const float* x, int64_t n, float* lo, float* hi) {
  __m512 mn = _mm512_setzero_ps(), mx = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);  // (lanes past the end: 0)
    mn = _mm512_min_ps(v, mn);  // a NaN in v gives the second operand: NaN is left out
    mx = _mm512_max_ps(v, mx);
  }
  *lo = _mm512_reduce_min_ps(mn);
  *hi = _mm512_reduce_max_ps(mx);
}

OL_DQ512 void QuantizeAvx512(const float* x, int64_t n, float scale, float zero, uint8_t* y) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero);
  const __m512 top = _mm512_set1_ps(255.0f), bottom = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 q = _mm512_add_ps(
        _mm512_roundscale_ps(_mm512_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        z);
    q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q), q, z);  // NaN: the zero
    q = _mm512_min_ps(_mm512_max_ps(q, bottom), top);
    _mm512_mask_cvtepi32_storeu_epi8(y + i, m, _mm512_cvtps_epi32(q));
  }
}
#endif

}  // namespace

UInt8Quantization DynamicUInt8Range(const float* x, int64_t n, VecPath path) {
  (void)path;  // (x86 only)
  float lo = 0.0f, hi = 0.0f;
#if defined(__x86_64__)
  if (path != VecPath::kPortable && CpuHasAvx512()) {
    RangeAvx512(x, n, &lo, &hi);
  } else
#endif
  {
    for (int64_t i = 0; i < n; ++i) {  // (comparisons with NaN are false: left out)
      if (x[i] < lo) lo = x[i];
      if (x[i] > hi) hi = x[i];
    }
  }
  UInt8Quantization q;
  q.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float initial = 0.0f - lo / q.scale;
  q.zero_point = static_cast<uint8_t>(std::nearbyint(std::clamp(initial, 0.0f, 255.0f)));
  return q;
}

void QuantizeUInt8(const float* x, int64_t n, UInt8Quantization q, uint8_t* y, VecPath path) {
  (void)path;  // (x86 only)
  const auto zero = static_cast<float>(q.zero_point);
#if defined(__x86_64__)
  if (path != VecPath::kPortable && CpuHasAvx512()) return QuantizeAvx512(x, n, q.scale, zero, y);
#endif
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] / q.scale) + zero;
    if (std::isnan(v)) v = zero;
    y[i] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
  }
}

}  // namespace onnx_light::ops::math
