#include "ops/math/code_dot_avx512.h"

#include <cstring>

#include "ops/math/code_dispatch.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

#if defined(__x86_64__)
namespace {

using namespace code;

#define OL_CODE512 __attribute__((target("avx512f,avx2,fma,f16c")))

// The per-lane shifts that bring packed element k (of a word) to the top of lane k.
template <RowCode C>
OL_CODE512 inline __m512i Shifts16() {
  if constexpr (C == RowCode::kInt4 || C == RowCode::kUint4)
    return _mm512_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  return _mm512_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
}

// Elements i .. i + 15 of the row starting at byte `row` as FLOAT (codes, zero not
// subtracted); i a multiple of 16.
template <RowCode C>
OL_CODE512 inline __m512 Load16(const uint8_t* row, uint64_t i, __m512i shifts) {
  if constexpr (C == RowCode::kFloat) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (C == RowCode::kHalf) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  } else if constexpr (C == RowCode::kBFloat16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  } else if constexpr (C == RowCode::kInt8 || C == RowCode::kUint8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
    return _mm512_cvtepi32_ps(C == RowCode::kInt8 ? _mm512_cvtepi8_epi32(x)
                                                  : _mm512_cvtepu8_epi32(x));
  } else if constexpr (C == RowCode::kInt4 || C == RowCode::kUint4) {
    // Sixteen nibbles in two words: word 0 to lanes 0-7, word 1 to lanes 8-15, nibble k moved
    // to the top of its lane, then shifted down (arithmetic for signed codes).
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i words = _mm512_permutexvar_epi32(
        idx,
        _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i / 2))));
    const __m512i v = _mm512_sllv_epi32(words, shifts);
    return _mm512_cvtepi32_ps(C == RowCode::kInt4 ? _mm512_srai_epi32(v, 28)
                                                  : _mm512_srli_epi32(v, 28));
  } else {
    uint32_t word;
    std::memcpy(&word, row + i / 4, 4);
    const __m512i v = _mm512_sllv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shifts);
    return _mm512_cvtepi32_ps(C == RowCode::kInt2 ? _mm512_srai_epi32(v, 30)
                                                  : _mm512_srli_epi32(v, 30));
  }
}

// The two halves of x added.
OL_CODE512 inline __m256 Half(__m512 x) {
  return _mm256_add_ps(_mm512_castps512_ps256(x),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

// [sum a, sum b, sum c, sum e] of four vectors.
OL_CODE512 inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 e) {
  const __m256 h =
      _mm256_hadd_ps(_mm256_hadd_ps(Half(a), Half(b)), _mm256_hadd_ps(Half(c), Half(e)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Dots of G query heads with R consecutive rows (R x G accumulators; each chunk of a row
// widened once for the G heads, each query chunk loaded once for the R rows).
// The line of `ahead` (null: none) at the offset of chunk i of a row, into L2, once per line.
template <RowCode C>
OL_CODE512 inline void PrefetchChunk(const uint8_t* ahead, uint64_t i) {
  if constexpr (PerByte(C) == 1)  // (math::PrefetchesAhead: never for packed rows)
    if (ahead != nullptr && Bytes<C>(i) % 64 == 0) _mm_prefetch(ahead + Bytes<C>(i), _MM_HINT_T1);
}

template <RowCode C, int G, int R, bool Z>
OL_CODE512 inline void DotRows(const float* q, int64_t q_stride, const uint8_t* row, uint64_t step,
                               int64_t d, __m512 zero, __m512i shifts, float scale, float* s,
                               int64_t s_stride, const uint8_t* ahead) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm512_setzero_ps();
  for (uint64_t i = 0; i < static_cast<uint64_t>(d); i += 16) {
    __m512 k[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      k[r] = Load16<C>(row + r * step, i, shifts);
      if constexpr (Z) k[r] = _mm512_sub_ps(k[r], zero);
      PrefetchChunk<C>(ahead == nullptr ? nullptr : ahead + r * step, i);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512 qv = _mm512_loadu_ps(q + g * q_stride + i);
      asm("" : "+v"(qv));  // one load for the R rows, not one folded into each FMA
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(qv, k[r], acc[r][g]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    for (int g = 0; g < G; ++g) s[g * s_stride + r] = scale * sums[g];
  }
}

template <RowCode C, int G, bool Z>
OL_CODE512 void Dots(const float* q, int64_t q_stride, const CodeRows& run, int64_t d, float* s,
                     int64_t s_stride) {
  const __m512 zero = _mm512_set1_ps(run.zero);
  __m512i shifts = Shifts16<C>();
  asm("" : "+v"(shifts));
  const uint64_t step = Bytes<C>(static_cast<uint64_t>(d));
  const uint8_t* row = ElementPtr<C>(run.data, run.first);
  const auto* ahead = static_cast<const uint8_t*>(run.ahead);
  auto next = [&](uint64_t rows) { return ahead == nullptr ? nullptr : ahead + rows * step; };
  int64_t t = 0;
  for (; t + 4 <= run.rows; t += 4, row += 4 * step)
    DotRows<C, G, 4, Z>(q, q_stride, row, step, d, zero, shifts, run.scale, s + t, s_stride,
                        next(static_cast<uint64_t>(t)));
  for (; t < run.rows; ++t, row += step)
    DotRows<C, G, 1, Z>(q, q_stride, row, step, d, zero, shifts, run.scale, s + t, s_stride,
                        next(static_cast<uint64_t>(t)));
}

// y[g][col .. col + 16W) += sum over the rows of runs[0..n) of ws[g][at] * code: G x W
// accumulators held in registers over every row.
template <RowCode C, int G, int W>
OL_CODE512 void SumsStrip(const float* ws, int64_t w_stride, const CodeRows* runs, int n, int64_t d,
                          int64_t col, float* y, int64_t y_stride) {
  __m512 acc[G][W];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < W; ++c) acc[g][c] = _mm512_loadu_ps(y + g * y_stride + col + 16 * c);
  const auto c0 = static_cast<uint64_t>(col);
  __m512i shifts = Shifts16<C>();
  asm("" : "+v"(shifts));
  const uint64_t step = Bytes<C>(static_cast<uint64_t>(d));
  int64_t at = 0;
  for (int r = 0; r < n; at += runs[r++].rows) {
    const uint8_t* row = ElementPtr<C>(runs[r].data, runs[r].first);
    const auto* ahead = static_cast<const uint8_t*>(runs[r].ahead);
    const float* w = ws + at;
    for (int64_t t = 0; t < runs[r].rows; ++t, row += step) {
      __m512 x[W];
#pragma GCC unroll 4
      for (int c = 0; c < W; ++c) {
        x[c] = Load16<C>(row, c0 + 16 * c, shifts);
        PrefetchChunk<C>(ahead == nullptr ? nullptr : ahead + static_cast<uint64_t>(t) * step,
                         c0 + 16 * c);
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512 wt = _mm512_set1_ps(w[g * w_stride + t]);
#pragma GCC unroll 4
        for (int c = 0; c < W; ++c) acc[g][c] = _mm512_fmadd_ps(wt, x[c], acc[g][c]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < W; ++c) _mm512_storeu_ps(y + g * y_stride + col + 16 * c, acc[g][c]);
}

}  // namespace

void CodeDotsAvx512(const float* q, int64_t q_stride, int64_t heads, const CodeRows& run, int64_t d,
                    float* s, int64_t s_stride) {
  ByCode(run.code, [&]<RowCode C>() {
    ByHeads<4>(heads, [&]<int G>() {
      if (run.zero != 0.0f)
        Dots<C, G, true>(q, q_stride, run, d, s, s_stride);
      else
        Dots<C, G, false>(q, q_stride, run, d, s, s_stride);
    });
  });
}

void CodeSumsAvx512(const float* ws, int64_t w_stride, int64_t heads, const CodeRows* runs, int n,
                    int64_t d, float* y, int64_t y_stride) {
  ByCode(runs[0].code, [&]<RowCode C>() {
    ByHeads<4>(heads, [&]<int G>() {
      int64_t col = 0;
      for (; col + 64 <= d; col += 64)
        SumsStrip<C, G, 4>(ws, w_stride, runs, n, d, col, y, y_stride);
      for (; col < d; col += 16) SumsStrip<C, G, 1>(ws, w_stride, runs, n, d, col, y, y_stride);
    });
  });
}

#else
void CodeDotsAvx512(const float*, int64_t, int64_t, const CodeRows&, int64_t, float*, int64_t) {}
void CodeSumsAvx512(const float*, int64_t, int64_t, const CodeRows*, int, int64_t, float*,
                    int64_t) {}
#endif

}  // namespace onnx_light::ops::math
