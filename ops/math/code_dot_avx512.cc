#include "ops/math/code_dot_avx512.h"

#include <cstring>

#include "ops/math/code_dispatch.h"
#include "ops/math/sum16_avx512.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

#if defined(__x86_64__)
namespace {

using namespace code;

#define OL_CODE512 __attribute__((target("avx512f,avx2,fma,f16c")))

// 4-bit chunks are read with their lanes interleaved: lane 2j holds element j of the 16, lane
// 2j + 1 element 8 + j (one broadcast of the chunk's 8 bytes, then one shift per lane), so the
// query chunks they meet and the sums' accumulators are interleaved the same way.
template <RowCode C>
constexpr bool kInterleaved = C == RowCode::kInt4 || C == RowCode::kUint4;

// Lane 2j <- element j, lane 2j + 1 <- element 8 + j (permutexvar indices), and back.
OL_CODE512 inline __m512i InterleaveIdx() {
  return _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
}
OL_CODE512 inline __m512i DeinterleaveIdx() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
}

// What reading a packed chunk needs in registers: the per-lane shifts that bring a lane's
// element to its low bits, and the table of the 16 values of those low 4 bits (code - zero).
struct Decoder {
  __m512i shifts;
  __m512 lut;
};

template <RowCode C>
OL_CODE512 inline Decoder MakeDecoder(float zero) {
  Decoder dec{_mm512_setzero_si512(), _mm512_setzero_ps()};
  if constexpr (PerByte(C) > 1) {
    alignas(64) float lut[16];
    for (int i = 0; i < 16; ++i) {
      int c = PerByte(C) == 2 ? i : i & 3;  // 2-bit codes: the low 2 of the 4 bits
      const int bits = PerByte(C) == 2 ? 4 : 2;
      if ((C == RowCode::kInt4 || C == RowCode::kInt2) && c >= (1 << (bits - 1))) c -= 1 << bits;
      lut[i] = static_cast<float>(c) - zero;
    }
    dec.lut = _mm512_load_ps(lut);
    dec.shifts = kInterleaved<C>
                     ? _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28)
                     : _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  }
  // Kept in registers (folded into every use as memory operands they cost a load each).
  asm("" : "+v"(dec.shifts), "+v"(dec.lut));
  return dec;
}

// Elements i .. i + 15 of the row starting at byte `row` as FLOAT; i a multiple of 16. Dense
// and 8-bit rows: the codes (zero not subtracted), in order; packed rows: code - zero (the
// decoder's table), interleaved for 4-bit codes.
template <RowCode C>
OL_CODE512 inline __m512 Load16(const uint8_t* row, uint64_t i, const Decoder& dec) {
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
  } else if constexpr (kInterleaved<C>) {
    // The 8 bytes in every 64-bit lane: even lanes hold elements 0-7, odd lanes 8-15.
    uint64_t bytes;
    std::memcpy(&bytes, row + i / 2, 8);
    const __m512i v =
        _mm512_srlv_epi32(_mm512_set1_epi64(static_cast<long long>(bytes)), dec.shifts);
    return _mm512_permutexvar_ps(v, dec.lut);
  } else {
    uint32_t word;
    std::memcpy(&word, row + i / 4, 4);
    const __m512i v = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), dec.shifts);
    return _mm512_permutexvar_ps(v, dec.lut);
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

// The line of `ahead` (null: none) at the offset of chunk i of a row, into L2, once per line.
template <RowCode C>
OL_CODE512 inline void PrefetchChunk(const uint8_t* ahead, uint64_t i) {
  if constexpr (PerByte(C) <= 2)  // (math::PrefetchesAhead: not for 2-bit rows)
    if (ahead != nullptr && Bytes<C>(i) % 64 == 0) _mm_prefetch(ahead + Bytes<C>(i), _MM_HINT_T1);
}

// Dots of G query heads with R consecutive rows (R x G accumulators; each chunk of a row
// widened once for the G heads, each query chunk loaded once for the R rows).
// PQ: permute each query chunk into the codes' lane order here (4-bit codes whose caller has
// not laid the query out interleaved).
template <RowCode C, int G, int R, bool Z, bool PQ>
OL_CODE512 inline void DotRows(const float* q, int64_t q_stride, const uint8_t* row, uint64_t step,
                               int64_t d, __m512 zero, const Decoder& dec, float scale, float* s,
                               int64_t s_stride, const uint8_t* ahead) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm512_setzero_ps();
  for (uint64_t i = 0; i < static_cast<uint64_t>(d); i += 16) {
    __m512 k[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      k[r] = Load16<C>(row + r * step, i, dec);
      if constexpr (Z) k[r] = _mm512_sub_ps(k[r], zero);
      PrefetchChunk<C>(ahead == nullptr ? nullptr : ahead + r * step, i);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512 qv = _mm512_loadu_ps(q + g * q_stride + i);
      if constexpr (PQ) qv = _mm512_permutexvar_ps(InterleaveIdx(), qv);
      asm("" : "+v"(qv));  // one load for the R rows, not one folded into each FMA
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(qv, k[r], acc[r][g]);
    }
  }
  if constexpr (R == 4) {
    // Lane 4g + r of one register: the dot of head g with row r.
    const __m512 sums = _mm512_mul_ps(_mm512_set1_ps(scale), Sum16(acc));
    _mm_storeu_ps(s, _mm512_castps512_ps128(sums));
    if constexpr (G > 1) _mm_storeu_ps(s + s_stride, _mm512_extractf32x4_ps(sums, 1));
    if constexpr (G > 2) _mm_storeu_ps(s + 2 * s_stride, _mm512_extractf32x4_ps(sums, 2));
    if constexpr (G > 3) _mm_storeu_ps(s + 3 * s_stride, _mm512_extractf32x4_ps(sums, 3));
  } else {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(16) float sums[4];
      _mm_store_ps(sums, Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
      for (int g = 0; g < G; ++g) s[g * s_stride + r] = scale * sums[g];
    }
  }
}

template <RowCode C, int G, bool Z, bool PQ>
OL_CODE512 void Dots(const float* q, int64_t q_stride, const CodeRows& run, int64_t d, float* s,
                     int64_t s_stride) {
  const __m512 zero = _mm512_set1_ps(run.zero);
  const Decoder dec = MakeDecoder<C>(run.zero);
  const uint64_t step = Bytes<C>(static_cast<uint64_t>(d));
  const uint8_t* row = ElementPtr<C>(run.data, run.first);
  const auto* ahead = static_cast<const uint8_t*>(run.ahead);
  auto next = [&](uint64_t rows) { return ahead == nullptr ? nullptr : ahead + rows * step; };
  int64_t t = 0;
  for (; t + 4 <= run.rows; t += 4, row += 4 * step)
    DotRows<C, G, 4, Z, PQ>(q, q_stride, row, step, d, zero, dec, run.scale, s + t, s_stride,
                            next(static_cast<uint64_t>(t)));
  for (; t < run.rows; ++t, row += step)
    DotRows<C, G, 1, Z, PQ>(q, q_stride, row, step, d, zero, dec, run.scale, s + t, s_stride,
                            next(static_cast<uint64_t>(t)));
}

// y[g][col .. col + 16W) += sum over the rows of runs[0..n) of ws[g][at] * code: G x W
// accumulators held in registers over every row.
template <RowCode C, int G, int W>
OL_CODE512 void SumsStrip(const float* ws, int64_t w_stride, const CodeRows* runs, int n, int64_t d,
                          int64_t col, float* y, int64_t y_stride, const float* factor,
                          const float* correction) {
  __m512 acc[G][W];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < W; ++c) {
      __m512 yv = _mm512_loadu_ps(y + g * y_stride + col + 16 * c);
      if constexpr (kInterleaved<C>) yv = _mm512_permutexvar_ps(InterleaveIdx(), yv);
      acc[g][c] = _mm512_fmsub_ps(yv, _mm512_set1_ps(factor[g]), _mm512_set1_ps(correction[g]));
    }
  const auto c0 = static_cast<uint64_t>(col);
  const Decoder dec = MakeDecoder<C>(0.0f);  // (zero points folded out by the caller)
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
        x[c] = Load16<C>(row, c0 + 16 * c, dec);
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
    for (int c = 0; c < W; ++c) {
      if constexpr (kInterleaved<C>)
        acc[g][c] = _mm512_permutexvar_ps(DeinterleaveIdx(), acc[g][c]);
      _mm512_storeu_ps(y + g * y_stride + col + 16 * c, acc[g][c]);
    }
}

// Dots of G heads with the rows of runs[0..n) (one code): 4-bit codes meet the query heads
// interleaved once for every run (up to 512 elements a head; wider heads permute each chunk as
// they read it).
template <RowCode C, int G>
OL_CODE512 void DotsRuns(const float* q, int64_t q_stride, const CodeRows* runs, int n, int64_t d,
                         float* s, int64_t s_stride) {
  constexpr int64_t kMaxLaidOut = 512;
  alignas(64) float laid_out[kInterleaved<C> ? G * kMaxLaidOut : 1];
  const bool lay_out = kInterleaved<C> && d <= kMaxLaidOut;
  if (lay_out)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t i = 0; i < d; i += 16)
        _mm512_store_ps(
            laid_out + g * d + i,
            _mm512_permutexvar_ps(InterleaveIdx(), _mm512_loadu_ps(q + g * q_stride + i)));
  int64_t at = 0;
  for (int r = 0; r < n; at += runs[r++].rows) {
    const CodeRows& run = runs[r];
    if (lay_out)
      Dots<C, G, false, false>(laid_out, d, run, d, s + at, s_stride);
    else if (PerByte(C) == 1 && run.zero != 0.0f)  // (packed codes: zero in the decoder's table)
      Dots<C, G, true, false>(q, q_stride, run, d, s + at, s_stride);
    else
      Dots<C, G, false, kInterleaved<C>>(q, q_stride, run, d, s + at, s_stride);
  }
}

}  // namespace

void CodeDotsAvx512(const float* q, int64_t q_stride, int64_t heads, const CodeRows* runs, int n,
                    int64_t d, float* s, int64_t s_stride) {
  ByCode(runs[0].code, [&]<RowCode C>() {
    ByHeads<4>(heads, [&]<int G>() { DotsRuns<C, G>(q, q_stride, runs, n, d, s, s_stride); });
  });
}

OL_CODE512 void CodeSumsAvx512(float* ws, int64_t w_stride, int64_t heads, const CodeRows* runs,
                               int n, int64_t d, const float* rescale, float* y, int64_t y_stride,
                               bool prepared) {
  // The weights times their run's scale (in place), and the zero points folded out of the
  // sums: sum_t ws * (code - zero) = sum_t ws * code - sum_r zero_r * sum_{t in r} ws; the
  // accumulators start from y * rescale - that correction.
  float factor[4] = {1, 1, 1, 1}, correction[4] = {0, 0, 0, 0};
  for (int64_t g = 0; g < heads; ++g) {
    if (rescale != nullptr) factor[g] = rescale[g];
    float* wg = ws + g * w_stride;
    for (int r = 0; r < n; wg += runs[r++].rows) {
      const float scale = runs[r].scale, zero = runs[r].zero;
      if (prepared || (scale == 1.0f && zero == 0.0f)) continue;
      const __m512 sv = _mm512_set1_ps(scale);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t t = 0; t < runs[r].rows; t += 16) {
        const int64_t left = runs[r].rows - t;
        const auto mask = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1u);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, wg + t), sv);
        _mm512_mask_storeu_ps(wg + t, mask, v);
        sum = _mm512_add_ps(sum, v);
      }
      if (zero != 0.0f) correction[g] += zero * _mm512_reduce_add_ps(sum);
    }
  }
  ByCode(runs[0].code, [&]<RowCode C>() {
    ByHeads<4>(heads, [&]<int G>() {
      int64_t col = 0;
      for (; col + 64 <= d; col += 64)
        SumsStrip<C, G, 4>(ws, w_stride, runs, n, d, col, y, y_stride, factor, correction);
      for (; col < d; col += 16)
        SumsStrip<C, G, 1>(ws, w_stride, runs, n, d, col, y, y_stride, factor, correction);
    });
  });
}

#else
void CodeDotsAvx512(const float*, int64_t, int64_t, const CodeRows*, int, int64_t, float*,
                    int64_t) {}
void CodeSumsAvx512(float*, int64_t, int64_t, const CodeRows*, int, int64_t, const float*, float*,
                    int64_t, bool) {}
#endif

}  // namespace onnx_light::ops::math
