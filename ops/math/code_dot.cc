#include "ops/math/code_dot.h"

#include <algorithm>
#include <cstring>

#include "ops/math/code_dispatch.h"
#include "ops/math/code_dot_avx512.h"
#include "ops/math/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/dtype.h"

namespace onnx_light::ops::math {

namespace {

using namespace code;

// The stored element e as FLOAT (the code itself for affine formats: zero not subtracted).
float Raw(RowCode c, const void* data, int64_t e) {
  const auto* b = static_cast<const uint8_t*>(data);
  switch (c) {
    case RowCode::kFloat:
      return static_cast<const float*>(data)[e];
    case RowCode::kHalf:
      return core::HalfToFloat(static_cast<const uint16_t*>(data)[e]);
    case RowCode::kBFloat16:
      return core::BFloat16ToFloat(static_cast<const uint16_t*>(data)[e]);
    case RowCode::kInt8:
      return static_cast<float>(static_cast<const int8_t*>(data)[e]);
    case RowCode::kUint8:
      return static_cast<float>(b[e]);
    case RowCode::kInt4:
    case RowCode::kUint4: {
      int v = (b[e / 2] >> (4 * (e % 2))) & 15;
      if (c == RowCode::kInt4 && v >= 8) v -= 16;
      return static_cast<float>(v);
    }
    case RowCode::kInt2:
    case RowCode::kUint2: {
      int v = (b[e / 4] >> (2 * (e % 4))) & 3;
      if (c == RowCode::kInt2 && v >= 2) v -= 4;
      return static_cast<float>(v);
    }
  }
  return 0.0f;
}

// (code - zero) of element e: exact for every code width.
inline float Centered(const CodeRows& run, int64_t e) {
  return Raw(run.code, run.data, e) - run.zero;
}

void DotsPortable(const float* q, int64_t q_stride, int64_t heads, const CodeRows& run, int64_t d,
                  float* s, int64_t s_stride) {
  for (int64_t t = 0; t < run.rows; ++t)
    for (int64_t g = 0; g < heads; ++g) {
      float acc = 0;
      const int64_t e = run.first + t * d;
      for (int64_t i = 0; i < d; ++i) acc += q[g * q_stride + i] * Centered(run, e + i);
      s[g * s_stride + t] = run.scale * acc;
    }
}

// y[g] += sum_t ws[g][t] * code(t, :) over columns [j0, d) (zero already folded out).
void SumsPortable(const float* ws, int64_t w_stride, int64_t heads, const CodeRows& run, int64_t d,
                  int64_t j0, float* y, int64_t y_stride) {
  for (int64_t t = 0; t < run.rows; ++t) {
    const int64_t e = run.first + t * d;
    for (int64_t g = 0; g < heads; ++g) {
      const float w = ws[g * w_stride + t];
      for (int64_t j = j0; j < d; ++j) y[g * y_stride + j] += w * Raw(run.code, run.data, e + j);
    }
  }
}

// The vector kernels read whole chunks of 8 (16) elements: packed rows must start on a byte.
bool Vectorisable(const CodeRows& run, int64_t d, VecPath path) {
  const int pb = PerByte(run.code);
  return path != VecPath::kPortable && CpuHasAvx2FmaF16c() && run.first % pb == 0 && d % pb == 0;
}

// AVX-512F for widths of whole 16-lane chunks, unless the caller asks for AVX2.
bool Wide(const CodeRows& run, int64_t d, VecPath path) {
  return path != VecPath::kAvx2 && d % 16 == 0 && Vectorisable(run, d, path) && CpuHasAvx512();
}

#if defined(__x86_64__)
#define OL_CODE_TARGET __attribute__((target("avx2,fma,f16c")))

// Elements i .. i + 7 of the row starting at byte `row` as FLOAT (codes, zero not
// subtracted); i is a multiple of 8.
// The per-lane shifts that bring packed element k of a word to the top of lane k (kept in a
// register by the callers: folded into every shift as a memory operand it cost a load each).
template <RowCode C>
OL_CODE_TARGET inline __m256i Shifts() {
  if constexpr (C == RowCode::kInt4 || C == RowCode::kUint4)
    return _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  return _mm256_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16);
}

template <RowCode C>
OL_CODE_TARGET inline __m256 Load8(const uint8_t* row, uint64_t i, __m256i shifts) {
  if constexpr (C == RowCode::kFloat) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (C == RowCode::kHalf) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  } else if constexpr (C == RowCode::kBFloat16) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (C == RowCode::kInt8 || C == RowCode::kUint8) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
    return _mm256_cvtepi32_ps(C == RowCode::kInt8 ? _mm256_cvtepi8_epi32(x)
                                                  : _mm256_cvtepu8_epi32(x));
  } else if constexpr (C == RowCode::kInt4 || C == RowCode::kUint4) {
    // Eight nibbles in one word: nibble k moved to the top of lane k, then shifted down
    // (arithmetic for signed codes).
    uint32_t word;
    std::memcpy(&word, row + i / 2, 4);
    const __m256i v = _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts);
    return _mm256_cvtepi32_ps(C == RowCode::kInt4 ? _mm256_srai_epi32(v, 28)
                                                  : _mm256_srli_epi32(v, 28));
  } else {
    uint16_t half;
    std::memcpy(&half, row + i / 4, 2);
    const __m256i v = _mm256_sllv_epi32(_mm256_set1_epi32(half), shifts);
    return _mm256_cvtepi32_ps(C == RowCode::kInt2 ? _mm256_srai_epi32(v, 30)
                                                  : _mm256_srli_epi32(v, 30));
  }
}

// [sum a, sum b, sum c, sum e] of four vectors.
OL_CODE_TARGET inline __m128 Sum4(__m256 a, __m256 b, __m256 c, __m256 e) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, e));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Dots of G query heads with the rows of one run, two rows at a time (2G accumulators; each
// chunk of a row widened once for the G heads). Z: subtract the zero point in registers.
template <RowCode C, int G, bool Z>
OL_CODE_TARGET void DotsAvx2(const float* q, int64_t q_stride, const CodeRows& run, int64_t d,
                             float* s, int64_t s_stride) {
  const __m256 zero = _mm256_set1_ps(run.zero);
  __m256i shifts = Shifts<C>();
  asm("" : "+x"(shifts));
  const int64_t dv = d & ~int64_t{7};
  auto row_tail = [&](int64_t e, int g) {
    float acc = 0;
    for (int64_t i = dv; i < d; ++i) acc += q[g * q_stride + i] * Centered(run, e + i);
    return acc;
  };
  int64_t t = 0;
  for (; t + 2 <= run.rows; t += 2) {
    const int64_t e0 = run.first + t * d, e1 = e0 + d;
    const uint8_t* p0 = ElementPtr<C>(run.data, e0);
    const uint8_t* p1 = ElementPtr<C>(run.data, e1);
    __m256 a0[4], a1[4];
    for (int g = 0; g < 4; ++g) a0[g] = a1[g] = _mm256_setzero_ps();
    for (uint64_t i = 0; i < static_cast<uint64_t>(dv); i += 8) {
      __m256 k0 = Load8<C>(p0, i, shifts), k1 = Load8<C>(p1, i, shifts);
      if constexpr (Z) {
        k0 = _mm256_sub_ps(k0, zero);
        k1 = _mm256_sub_ps(k1, zero);
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        __m256 qv = _mm256_loadu_ps(q + g * q_stride + i);
        // One load of the query chunk for both rows: GCC would fold it into each FMA, and
        // the loads (not the FMAs) then bound the loop.
        asm("" : "+x"(qv));
        a0[g] = _mm256_fmadd_ps(qv, k0, a0[g]);
        a1[g] = _mm256_fmadd_ps(qv, k1, a1[g]);
      }
    }
    alignas(16) float r0[4], r1[4];
    _mm_store_ps(r0, Sum4(a0[0], a0[1], a0[2], a0[3]));
    _mm_store_ps(r1, Sum4(a1[0], a1[1], a1[2], a1[3]));
    for (int g = 0; g < G; ++g) {
      float x0 = r0[g], x1 = r1[g];
      if (dv < d) {
        x0 += row_tail(e0, g);
        x1 += row_tail(e1, g);
      }
      s[g * s_stride + t] = run.scale * x0;
      s[g * s_stride + t + 1] = run.scale * x1;
    }
  }
  if (t < run.rows) {
    const int64_t e0 = run.first + t * d;
    const uint8_t* p0 = ElementPtr<C>(run.data, e0);
    __m256 a0[4];
    for (int g = 0; g < 4; ++g) a0[g] = _mm256_setzero_ps();
    for (uint64_t i = 0; i < static_cast<uint64_t>(dv); i += 8) {
      __m256 k0 = Load8<C>(p0, i, shifts);
      if constexpr (Z) k0 = _mm256_sub_ps(k0, zero);
      for (int g = 0; g < G; ++g)
        a0[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * q_stride + i), k0, a0[g]);
    }
    alignas(16) float r0[4];
    _mm_store_ps(r0, Sum4(a0[0], a0[1], a0[2], a0[3]));
    for (int g = 0; g < G; ++g)
      s[g * s_stride + t] = run.scale * (r0[g] + (dv < d ? row_tail(e0, g) : 0.0f));
  }
}

// Accumulator (g, c) of a strip: its chunk of y, or zero when the strip has no such chunk.
template <int G, int W>
OL_CODE_TARGET inline __m256 LoadAcc(const float* y, int64_t y_stride, int64_t col, int g, int c) {
  return g < G && c < W ? _mm256_loadu_ps(y + g * y_stride + col + 8 * c) : _mm256_setzero_ps();
}

// y[g][col .. col + 8W) += sum over the rows of runs[0..n) (all of code C) of ws[g][at] *
// code: G x W accumulators held in registers over every row (written out one by one: GCC
// kept an accumulator array on the stack).
template <RowCode C, int G, int W>
OL_CODE_TARGET void SumsStripAvx2(const float* ws, int64_t w_stride, const CodeRows* runs, int n,
                                  int64_t d, int64_t col, float* y, int64_t y_stride) {
  static_assert(G >= 1 && G <= 4 && (W == 1 || W == 2));
  __m256 a00 = LoadAcc<G, W>(y, y_stride, col, 0, 0), a01 = LoadAcc<G, W>(y, y_stride, col, 0, 1);
  __m256 a10 = LoadAcc<G, W>(y, y_stride, col, 1, 0), a11 = LoadAcc<G, W>(y, y_stride, col, 1, 1);
  __m256 a20 = LoadAcc<G, W>(y, y_stride, col, 2, 0), a21 = LoadAcc<G, W>(y, y_stride, col, 2, 1);
  __m256 a30 = LoadAcc<G, W>(y, y_stride, col, 3, 0), a31 = LoadAcc<G, W>(y, y_stride, col, 3, 1);
  const auto c0 = static_cast<uint64_t>(col);
  __m256i shifts = Shifts<C>();
  asm("" : "+x"(shifts));
  int64_t at = 0;
  for (int r = 0; r < n; at += runs[r++].rows) {
    const CodeRows& run = runs[r];
    const float* w0 = ws + at;
    const float* w1 = w0 + w_stride;
    const float* w2 = w1 + w_stride;
    const float* w3 = w2 + w_stride;
    const uint8_t* row = ElementPtr<C>(run.data, run.first);
    const uint64_t step = Bytes<C>(static_cast<uint64_t>(d));
    for (int64_t t = 0; t < run.rows; ++t, row += step) {
      const __m256 x0 = Load8<C>(row, c0, shifts);
      const __m256 x1 = W > 1 ? Load8<C>(row, c0 + 8, shifts) : _mm256_setzero_ps();
      __m256 wt = _mm256_broadcast_ss(w0 + t);
      a00 = _mm256_fmadd_ps(wt, x0, a00);
      if constexpr (W > 1) a01 = _mm256_fmadd_ps(wt, x1, a01);
      if constexpr (G > 1) {
        wt = _mm256_broadcast_ss(w1 + t);
        a10 = _mm256_fmadd_ps(wt, x0, a10);
        if constexpr (W > 1) a11 = _mm256_fmadd_ps(wt, x1, a11);
      }
      if constexpr (G > 2) {
        wt = _mm256_broadcast_ss(w2 + t);
        a20 = _mm256_fmadd_ps(wt, x0, a20);
        if constexpr (W > 1) a21 = _mm256_fmadd_ps(wt, x1, a21);
      }
      if constexpr (G > 3) {
        wt = _mm256_broadcast_ss(w3 + t);
        a30 = _mm256_fmadd_ps(wt, x0, a30);
        if constexpr (W > 1) a31 = _mm256_fmadd_ps(wt, x1, a31);
      }
    }
  }
  const __m256 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < W; ++c) _mm256_storeu_ps(y + g * y_stride + col + 8 * c, acc[g][c]);
}

template <RowCode C, int G>
void SumsAvx2(const float* ws, int64_t w_stride, const CodeRows* runs, int n, int64_t d, float* y,
              int64_t y_stride) {
  const int64_t dv = d & ~int64_t{7};
  int64_t col = 0;
  for (; col + 16 <= dv; col += 16)
    SumsStripAvx2<C, G, 2>(ws, w_stride, runs, n, d, col, y, y_stride);
  if (col < dv) SumsStripAvx2<C, G, 1>(ws, w_stride, runs, n, d, col, y, y_stride);
  if (dv < d) {
    int64_t at = 0;
    for (int r = 0; r < n; at += runs[r++].rows)
      SumsPortable(ws + at, w_stride, G, runs[r], d, dv, y, y_stride);
  }
}

template <RowCode C, int G>
void DotsAvx2Zero(const float* q, int64_t q_stride, const CodeRows& run, int64_t d, float* s,
                  int64_t s_stride) {
  if (run.zero != 0.0f)
    DotsAvx2<C, G, true>(q, q_stride, run, d, s, s_stride);
  else
    DotsAvx2<C, G, false>(q, q_stride, run, d, s, s_stride);
}

#endif

}  // namespace

bool PrefetchesAhead(const CodeRows& run, int64_t d) {
  // Whole-byte and 4-bit rows (one prefetch per 64 bytes of a row: every row of a 128-wide
  // 4-bit head): asked for by the caller in one burst per block, an INT4 cache's lines stalled
  // on the fill buffers instead (INT4 at 32k tokens, one thread: 8.8-9.2 -> 7.5-7.9 ms,
  // perf/README.md "2026-12-05 (evening)"). Not 2-bit rows: there the per-chunk prefetch cost
  // more than it saved (INT2 at 32k tokens 10.1 -> 11.2 ms).
  return PerByte(run.code) <= 2 && Wide(run, d, VecPath::kAuto);
}

const void* RunBytes(const CodeRows& run) {
  const void* p = nullptr;
  ByCode(run.code, [&]<RowCode C>() { p = ElementPtr<C>(run.data, run.first); });
  return p;
}

float CodeValue(const CodeRows& run, int64_t t, int64_t d, int64_t width) {
  return Centered(run, run.first + t * width + d) * run.scale;
}

void GroupCodeDots(const float* q, int64_t q_stride, int64_t heads, const CodeRows* runs, int nruns,
                   int64_t d, float* s, int64_t s_stride, VecPath path) {
  int64_t at = 0;
  for (int r = 0; r < nruns;) {
    const CodeRows& run = runs[r];
    if (Wide(run, d, path)) {  // with the next runs of the same code in one call
      int n = 1;
      int64_t rows = run.rows;
      while (r + n < nruns && runs[r + n].code == run.code && Wide(runs[r + n], d, path))
        rows += runs[r + n++].rows;
      for (int64_t g0 = 0; g0 < heads; g0 += 4)
        CodeDotsAvx512(q + g0 * q_stride, q_stride, std::min<int64_t>(4, heads - g0), runs + r, n,
                       d, s + g0 * s_stride + at, s_stride);
      at += rows;
      r += n;
      continue;
    }
    if (!Vectorisable(run, d, path)) {
      DotsPortable(q, q_stride, heads, run, d, s + at, s_stride);
      at += runs[r++].rows;
      continue;
    }
#if defined(__x86_64__)
    for (int64_t g0 = 0; g0 < heads; g0 += 4) {
      const float* qg = q + g0 * q_stride;
      float* sg = s + g0 * s_stride + at;
      ByCode(run.code, [&]<RowCode C>() {
        ByHeads<4>(heads - g0,
                   [&]<int G>() { DotsAvx2Zero<C, G>(qg, q_stride, run, d, sg, s_stride); });
      });
    }
#endif
    at += runs[r++].rows;
  }
}

void GroupCodeWeightedRowSums(float* w, int64_t w_stride, int64_t heads, const CodeRows* runs,
                              int nruns, int64_t d, const float* rescale, float* y,
                              int64_t y_stride, VecPath path) {
  // Every run of one code on AVX-512 (the paged cache's common case): one pass per group of
  // four heads, the scales and zero points applied in registers.
  bool wide = nruns > 0;
  for (int r = 0; r < nruns && wide; ++r)
    wide = runs[r].code == runs[0].code && Wide(runs[r], d, path);
  if (wide) {
    for (int64_t g0 = 0; g0 < heads; g0 += 4)
      CodeSumsAvx512(w + g0 * w_stride, w_stride, std::min<int64_t>(4, heads - g0), runs, nruns, d,
                     rescale == nullptr ? nullptr : rescale + g0, y + g0 * y_stride, y_stride);
    return;
  }
  for (int64_t g0 = 0; g0 < heads; g0 += 4) {
    const int64_t group = std::min<int64_t>(4, heads - g0);
    float* wg = w + g0 * w_stride;
    float* yg = y + g0 * y_stride;
    // Weights times each run's scale (in place), and the zero points folded out:
    // sum_t ws * (code - zero) = sum_t ws * code - sum_r zero_r * sum_{t in r} ws.
    float correction[4] = {0, 0, 0, 0};
    int64_t at = 0;
    for (int r = 0; r < nruns; at += runs[r++].rows)
      for (int64_t g = 0; g < group; ++g) {
        float* wr = wg + g * w_stride + at;
        const float scale = runs[r].scale;
        if (scale != 1.0f)
          for (int64_t t = 0; t < runs[r].rows; ++t) wr[t] *= scale;  // vectorised
        if (runs[r].zero == 0.0f) continue;  // (signed codes and dense rows: nothing to fold)
        float sum = 0;
        for (int64_t t = 0; t < runs[r].rows; ++t) sum += wr[t];
        correction[g] += runs[r].zero * sum;
      }
    for (int64_t g = 0; g < group; ++g) {
      const float factor = rescale != nullptr ? rescale[g0 + g] : 1.0f;
      if (factor == 1.0f && correction[g] == 0.0f) continue;
      float* yr = yg + g * y_stride;
      for (int64_t j = 0; j < d; ++j) yr[j] = yr[j] * factor - correction[g];
    }
    at = 0;
    for (int r = 0; r < nruns;) {
      if (!Vectorisable(runs[r], d, path)) {
        SumsPortable(wg + at, w_stride, group, runs[r], d, 0, yg, y_stride);
        at += runs[r++].rows;
        continue;
      }
      // Consecutive runs of one code in one pass: the accumulators stay in registers.
      const bool wide = Wide(runs[r], d, path);
      int n = 1;
      int64_t rows = runs[r].rows;
      while (r + n < nruns && runs[r + n].code == runs[r].code &&
             Vectorisable(runs[r + n], d, path) && Wide(runs[r + n], d, path) == wide)
        rows += runs[r + n++].rows;
      if (wide) {  // (weights scaled and zero points folded above: nothing more to apply)
        CodeSumsAvx512(wg + at, w_stride, group, runs + r, n, d, nullptr, yg, y_stride, true);
        at += rows;
        r += n;
        continue;
      }
#if defined(__x86_64__)
      ByCode(runs[r].code, [&]<RowCode C>() {
        ByHeads<4>(group, [&]<int G>() {
          SumsAvx2<C, G>(wg + at, w_stride, runs + r, n, d, yg, y_stride);
        });
      });
#endif
      at += rows;
      r += n;
    }
  }
}

}  // namespace onnx_light::ops::math
