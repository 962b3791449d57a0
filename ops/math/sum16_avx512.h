// The sums of 16 AVX-512 vectors in one register: a transposing tree, 30 shuffles and 15
// additions for the 16 sums, against a horizontal sum each. The code-domain kernels' dots of
// four rows with four query heads (code_dot_avx512.cc) end in it, and so does
// perf/bench_integer_dots.
#pragma once

#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

#if defined(__x86_64__)
// Lane 4g + r: the sum of acc[r][g]'s lanes.
__attribute__((target("avx512f"))) inline __m512 Sum16(const __m512 (&acc)[4][4]) {
  __m512 u[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // vectors 2j, 2j + 1 (vector m = acc[m % 4][m / 4])
    const __m512 a = acc[(2 * j) % 4][(2 * j) / 4], b = acc[(2 * j + 1) % 4][(2 * j + 1) / 4];
    u[j] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  __m512 w[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512d a = _mm512_castps_pd(u[2 * j]), b = _mm512_castps_pd(u[2 * j + 1]);
    w[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Each 128-bit lane of w[j] holds partial sums of vectors 4j .. 4j + 3.
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

}  // namespace onnx_light::ops::math
