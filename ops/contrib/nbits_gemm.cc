#include "ops/contrib/nbits_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/math/common.h"
#include "ops/math/cpu_features.h"
#include "ops/math/gemm.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::contrib {

namespace {

constexpr int64_t kTile = kNBitsTile;

uint8_t SourceQ(const NBitsSource& s, int64_t n, int64_t k, int64_t k_blocks) {
  const int64_t blob = s.block * s.bits / 8;
  const uint8_t* col = s.b + n * k_blocks * blob;
  if (s.bits == 8) return col[k];
  const uint8_t byte = col[k / 2];
  return (k & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}

float SourceZp(const NBitsSource& s, int64_t n, int64_t kb, int64_t k_blocks) {
  if (s.zp_float != nullptr) return s.zp_float[n * k_blocks + kb];
  if (s.zp_packed == nullptr) return static_cast<float>(1 << (s.bits - 1));
  if (s.bits == 8) return s.zp_packed[n * k_blocks + kb];
  const uint8_t byte = s.zp_packed[n * ((k_blocks + 1) / 2) + kb / 2];
  return static_cast<float>((kb & 1) ? (byte >> 4) : (byte & 0xF));
}

// Sum of a over each block (the zero point's term).
void BlockSums(const float* a_pad, int64_t k_blocks, int64_t block, float* sums) {
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    float s = 0.0f;
    for (int64_t i = 0; i < block; ++i) s += a_pad[kb * block + i];
    sums[kb] = s;
  }
}

// acc[16] = sum_k a[k] q[k][col] over one block (portable).
void BlockDotPortable(const uint8_t* q, const float* a, int64_t block, int bits, float acc[16]) {
  for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
  if (bits == 4) {
    for (int64_t p = 0; p < block / 2; ++p, q += kTile) {
      const float a0 = a[2 * p], a1 = a[2 * p + 1];
      for (int j = 0; j < kTile; ++j)
        acc[j] += a0 * static_cast<float>(q[j] & 0xF) + a1 * static_cast<float>(q[j] >> 4);
    }
  } else {
    for (int64_t i = 0; i < block; ++i, q += kTile)
      for (int j = 0; j < kTile; ++j) acc[j] += a[i] * static_cast<float>(q[j]);
  }
}

void GemvTilesPortable(const PackedNBits& w, const float* a_pad, const float* a_sums, float* y,
                       int64_t t0, int64_t t1) {
  float acc[kTile];
  for (int64_t t = t0; t < t1; ++t) {
    float out[kTile] = {};
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      BlockDotPortable(w.weights(t, kb), a_pad + kb * w.block(), w.block(), w.bits(), acc);
      const float* s = w.scales(t, kb);
      const float* z = w.neg_scaled_zp(t, kb);
      if (z != nullptr) {
        for (int j = 0; j < kTile; ++j) out[j] += s[j] * acc[j] + z[j] * a_sums[kb];
      } else {
        const float zs = w.uniform_zp() * a_sums[kb];
        for (int j = 0; j < kTile; ++j) out[j] += s[j] * (acc[j] - zs);
      }
    }
    const int64_t cols = std::min(kTile, w.n() - t * kTile);
    std::memcpy(y + t * kTile, out, static_cast<size_t>(cols) * sizeof(float));
  }
}

#if defined(__x86_64__)
#define OL_AVX2 __attribute__((target("avx2,fma")))

// Two 8-lane accumulators (columns 0-7 and 8-15) over one block; even and odd rows use
// separate accumulators so consecutive FMAs do not wait on each other.
OL_AVX2 void BlockDot4Avx2(const uint8_t* q, const float* a, int64_t block, __m256& lo,
                           __m256& hi) {
  const __m256i mask = _mm256_set1_epi32(0xF);
  __m256 lo0 = _mm256_setzero_ps(), lo1 = _mm256_setzero_ps();
  __m256 hi0 = _mm256_setzero_ps(), hi1 = _mm256_setzero_ps();
  for (int64_t p = 0; p < block / 2; ++p, q += kTile) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m256i l = _mm256_cvtepu8_epi32(bytes);
    const __m256i h = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    const __m256 a0 = _mm256_broadcast_ss(a + 2 * p), a1 = _mm256_broadcast_ss(a + 2 * p + 1);
    lo0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(l, mask)), a0, lo0);
    hi0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(h, mask)), a0, hi0);
    lo1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(l, 4)), a1, lo1);
    hi1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 4)), a1, hi1);
  }
  lo = _mm256_add_ps(lo0, lo1);
  hi = _mm256_add_ps(hi0, hi1);
}

OL_AVX2 void BlockDot8Avx2(const uint8_t* q, const float* a, int64_t block, __m256& lo,
                           __m256& hi) {
  __m256 lo0 = _mm256_setzero_ps(), lo1 = _mm256_setzero_ps();
  __m256 hi0 = _mm256_setzero_ps(), hi1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < block; i += 2, q += 2 * kTile) {
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kTile));
    const __m256 a0 = _mm256_broadcast_ss(a + i), a1 = _mm256_broadcast_ss(a + i + 1);
    lo0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(r0)), a0, lo0);
    hi0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(r0, 8))), a0, hi0);
    lo1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(r1)), a1, lo1);
    hi1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(r1, 8))), a1, hi1);
  }
  lo = _mm256_add_ps(lo0, lo1);
  hi = _mm256_add_ps(hi0, hi1);
}

// Block kb of tile t's weights and scales, kNBitsWeightsAhead further on (see there).
inline void PrefetchBlock(const PackedNBits& w, int64_t t, int64_t kb) {
  const auto* q = reinterpret_cast<const char*>(w.weights(t, kb)) + kNBitsWeightsAhead;
  for (int64_t at = 0; at < w.block_bytes(); at += 64) _mm_prefetch(q + at, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(w.scales(t, kb)) + kNBitsWeightsAhead / 4,
               _MM_HINT_T0);
}

OL_AVX2 void GemvTilesAvx2(const PackedNBits& w, const float* a_pad, const float* a_sums, float* y,
                           int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    __m256 out_lo = _mm256_setzero_ps(), out_hi = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      PrefetchBlock(w, t, kb);
      __m256 lo, hi;
      if (w.bits() == 4)
        BlockDot4Avx2(w.weights(t, kb), a_pad + kb * w.block(), w.block(), lo, hi);
      else
        BlockDot8Avx2(w.weights(t, kb), a_pad + kb * w.block(), w.block(), lo, hi);
      const float* s = w.scales(t, kb);
      const float* z = w.neg_scaled_zp(t, kb);
      if (z != nullptr) {
        const __m256 sum = _mm256_broadcast_ss(a_sums + kb);
        out_lo = _mm256_fmadd_ps(_mm256_loadu_ps(z), sum, out_lo);
        out_hi = _mm256_fmadd_ps(_mm256_loadu_ps(z + 8), sum, out_hi);
      } else {
        const __m256 zs = _mm256_set1_ps(-w.uniform_zp() * a_sums[kb]);
        lo = _mm256_add_ps(lo, zs);
        hi = _mm256_add_ps(hi, zs);
      }
      out_lo = _mm256_fmadd_ps(_mm256_loadu_ps(s), lo, out_lo);
      out_hi = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), hi, out_hi);
    }
    const int64_t cols = std::min(kTile, w.n() - t * kTile);
    if (cols == kTile) {
      _mm256_storeu_ps(y + t * kTile, out_lo);
      _mm256_storeu_ps(y + t * kTile + 8, out_hi);
    } else {
      alignas(32) float out[kTile];
      _mm256_store_ps(out, out_lo);
      _mm256_store_ps(out + 8, out_hi);
      std::memcpy(y + t * kTile, out, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

// ---- AVX-512: 1-4 rows, float activations ---------------------------------------------------

#define OL_AVX512F __attribute__((target("avx2,fma,avx512f")))

// R rows (1..4) of float activations against the same tiles, a tile's 16 columns in one
// register and each block decoded once for all R rows: per row and lane exactly
// GemvTilesAvx2's operations in its order (even and odd rows in separate accumulators, then
// the same epilogue), so the same bits, from half the decode and multiply-add instructions;
// R = 1 is the single-row GEMV.
template <int R>
OL_AVX512F void GemvRowsAvx512(const PackedNBits& w, const float* a_pad, const float* a_sums,
                               float* y, int64_t t0, int64_t t1) {
  const int64_t a_stride = w.k_blocks() * w.block(), n = w.n();
  // The 16 codes as floats: one permute (on the low 4 bits of each lane) replaces a mask and
  // a conversion per 16 weights; the values, so the bits, are the same.
  const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t t = t0; t < t1; ++t) {
    __m512 out[R];
    for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      PrefetchBlock(w, t, kb);
      __m512 acc0[R], acc1[R];
      for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
      const uint8_t* q = w.weights(t, kb);
      const float* a = a_pad + kb * w.block();
      if (w.bits() == 4) {
        for (int64_t p = 0; p < w.block() / 2; ++p, q += kTile) {
          const __m512i v =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
          const __m512 even = _mm512_permutexvar_ps(v, codes);
          const __m512 odd = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), codes);
          for (int r = 0; r < R; ++r) {
            acc0[r] = _mm512_fmadd_ps(even, _mm512_set1_ps(a[r * a_stride + 2 * p]), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(odd, _mm512_set1_ps(a[r * a_stride + 2 * p + 1]), acc1[r]);
          }
        }
      } else {
        for (int64_t i = 0; i < w.block(); i += 2, q += 2 * kTile) {
          const __m512 r0 = _mm512_cvtepi32_ps(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
          const __m512 r1 = _mm512_cvtepi32_ps(
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kTile))));
          for (int r = 0; r < R; ++r) {
            acc0[r] = _mm512_fmadd_ps(r0, _mm512_set1_ps(a[r * a_stride + i]), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(r1, _mm512_set1_ps(a[r * a_stride + i + 1]), acc1[r]);
          }
        }
      }
      const float* z = w.neg_scaled_zp(t, kb);
      const __m512 s = _mm512_loadu_ps(w.scales(t, kb));
      for (int r = 0; r < R; ++r) {
        __m512 dot = _mm512_add_ps(acc0[r], acc1[r]);
        const float a_sum = a_sums[r * w.k_blocks() + kb];
        if (z != nullptr)
          out[r] = _mm512_fmadd_ps(_mm512_loadu_ps(z), _mm512_set1_ps(a_sum), out[r]);
        else
          dot = _mm512_add_ps(dot, _mm512_set1_ps(-w.uniform_zp() * a_sum));
        out[r] = _mm512_fmadd_ps(s, dot, out[r]);
      }
    }
    const int64_t cols = std::min(kTile, n - t * kTile);
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(y + r * n + t * kTile, static_cast<__mmask16>((1u << cols) - 1u),
                            out[r]);
  }
}
#endif

// ---- int8 activations (accuracy_level 4) --------------------------------------------------

constexpr int64_t kGroup = kInt8Group;

// The activation row of the int8 GEMV: per two row pairs (4 rows) one 32-byte vector, whose
// low half repeats (q[4i], q[4i+1]) and high half (q[4i+2], q[4i+3]), matching the tile
// layout's two consecutive 16-byte row pairs; a scale and the sum of q per group of 32.
struct Int8Row {
  std::vector<int8_t> q;  // the quantized row itself (k_pad values)
  std::vector<int8_t> pairs;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

Int8Row MakeInt8Row(const PackedNBits& w, const float* a) {
  const int64_t k_pad = w.k_blocks() * w.block(), groups = k_pad / kGroup;
  Int8Row row;
  std::vector<int8_t>& q = row.q;
  q.resize(static_cast<size_t>(k_pad));
  row.scales.resize(static_cast<size_t>(groups));
  row.sums.resize(static_cast<size_t>(groups));
  QuantizeActivationsWithSums(a, w.k(), k_pad, q.data(), row.scales.data(), row.sums.data());
  row.pairs.resize(static_cast<size_t>(k_pad / 4 * 32));
  for (int64_t i = 0; i < k_pad / 4; ++i)
    for (int j = 0; j < 16; ++j) {
      const int64_t half = j < 8 ? 0 : 2;
      row.pairs[static_cast<size_t>(i * 32 + 2 * j)] = q[static_cast<size_t>(4 * i + half)];
      row.pairs[static_cast<size_t>(i * 32 + 2 * j + 1)] = q[static_cast<size_t>(4 * i + half + 1)];
    }
  return row;
}

// out[j] += float(dot[j] - zp * sum) * (scale[j] * s_a) (+ nszp[j] * s_a * sum): the group's
// float epilogue, in the same operation order as the AVX2 path (fma).
void Int8Epilogue(const PackedNBits& w, int64_t t, int64_t kb, const Int8Row& r, int64_t g,
                  const int32_t dot[16], float out[16]) {
  const float* s = w.scales(t, kb);
  const float* z = w.neg_scaled_zp(t, kb);
  const float sa = r.scales[static_cast<size_t>(g)];
  const int32_t sum = r.sums[static_cast<size_t>(g)];
  const int32_t zsum = z != nullptr ? 0 : static_cast<int32_t>(w.uniform_zp()) * sum;
  for (int j = 0; j < kTile; ++j) {
    out[j] = std::fma(static_cast<float>(dot[j] - zsum), s[j] * sa, out[j]);
    if (z != nullptr) out[j] = std::fma(z[j], sa * static_cast<float>(sum), out[j]);
  }
}

void GemvInt8Portable(const PackedNBits& w, const Int8Row& r, float* y, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float out[kTile] = {};
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      const uint8_t* q = w.weights(t, kb);
      for (int64_t g = 0; g < w.block() / kGroup; ++g) {
        int32_t dot[kTile] = {};
        const int64_t k0 = kb * w.block() + g * kGroup;
        for (int64_t p = 0; p < kGroup / 2; ++p, q += kTile) {
          const int64_t k = k0 + 2 * p;
          const int8_t* a = r.pairs.data() + (k / 4) * 32 + (k % 4 == 0 ? 0 : 16);
          for (int j = 0; j < kTile; ++j) dot[j] += (q[j] & 0xF) * a[0] + (q[j] >> 4) * a[1];
        }
        Int8Epilogue(w, t, kb, r, k0 / kGroup, dot, out);
      }
    }
    std::memcpy(y + t * kTile, out,
                static_cast<size_t>(std::min(kTile, w.n() - t * kTile)) * sizeof(float));
  }
}

#if defined(__x86_64__)
OL_AVX2 void GemvInt8Avx2(const PackedNBits& w, const Int8Row& r, float* y, int64_t t0,
                          int64_t t1) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t t = t0; t < t1; ++t) {
    __m256 out_lo = _mm256_setzero_ps(), out_hi = _mm256_setzero_ps();
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      const uint8_t* q = w.weights(t, kb);
      const float* s = w.scales(t, kb);
      const float* z = w.neg_scaled_zp(t, kb);
      _mm_prefetch(reinterpret_cast<const char*>(s) + kNBitsWeightsAhead / 4, _MM_HINT_T0);
      for (int64_t g = 0; g < w.block() / kGroup; ++g) {
        const int64_t k0 = kb * w.block() + g * kGroup, gi = k0 / kGroup;
        const int8_t* a = r.pairs.data() + (k0 / 4) * 32;
        __m256i acc_a = _mm256_setzero_si256(), acc_b = _mm256_setzero_si256();
        // 8 steps of 4 rows x 16 columns; int16 sums stay below 8 * 2 * 15 * 127 < 2^15.
        for (int step = 0; step < 8; ++step, q += 32, a += 32) {
          if (step % 2 == 0)
            _mm_prefetch(reinterpret_cast<const char*>(q) + kNBitsWeightsAhead, _MM_HINT_T0);
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
          const __m256i lo = _mm256_and_si256(bytes, nibble);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
          const __m256i act = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
          acc_a = _mm256_add_epi16(acc_a, _mm256_maddubs_epi16(_mm256_unpacklo_epi8(lo, hi), act));
          acc_b = _mm256_add_epi16(acc_b, _mm256_maddubs_epi16(_mm256_unpackhi_epi8(lo, hi), act));
        }
        // Columns 0-7 are acc_a's two halves (rows 4i, 4i+1 and 4i+2, 4i+3), 8-15 acc_b's.
        __m256i d0 = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc_a)),
                                      _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc_a, 1)));
        __m256i d1 = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc_b)),
                                      _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc_b, 1)));
        const float sa = r.scales[static_cast<size_t>(gi)];
        const int32_t sum = r.sums[static_cast<size_t>(gi)];
        if (z == nullptr) {
          const __m256i zsum = _mm256_set1_epi32(static_cast<int32_t>(w.uniform_zp()) * sum);
          d0 = _mm256_sub_epi32(d0, zsum);
          d1 = _mm256_sub_epi32(d1, zsum);
        }
        const __m256 vsa = _mm256_set1_ps(sa);
        out_lo =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_mul_ps(_mm256_loadu_ps(s), vsa), out_lo);
        out_hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_mul_ps(_mm256_loadu_ps(s + 8), vsa),
                                 out_hi);
        if (z != nullptr) {
          const __m256 zs = _mm256_set1_ps(sa * static_cast<float>(sum));
          out_lo = _mm256_fmadd_ps(_mm256_loadu_ps(z), zs, out_lo);
          out_hi = _mm256_fmadd_ps(_mm256_loadu_ps(z + 8), zs, out_hi);
        }
      }
    }
    alignas(32) float out[kTile];
    _mm256_store_ps(out, out_lo);
    _mm256_store_ps(out + 8, out_hi);
    std::memcpy(y + t * kTile, out,
                static_cast<size_t>(std::min(kTile, w.n() - t * kTile)) * sizeof(float));
  }
}
#endif

#if defined(__x86_64__)
#define OL_VNNI_VBMI __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi")))

// One 64-byte load holds 8 rows x 16 columns (4 row pairs: byte j of pair p is column j's
// rows 2p | 2p+1 << 4). vpermt2b over its low and high nibbles gives, for 4 rows at a time,
// column j's 4 values in 32-bit lane j, which vpdpbusd multiplies with the 4 activations.
// Integer sums and the float epilogue are the AVX2 path's, so the results are bit for bit.
OL_VNNI_VBMI void GemvInt8Vnni(const PackedNBits& w, const Int8Row& r, float* y, int64_t t0,
                               int64_t t1) {
  alignas(64) uint8_t order[2][64];
  for (int j = 0; j < 16; ++j)
    for (int half = 0; half < 2; ++half) {
      const uint8_t base = static_cast<uint8_t>(32 * half + j);
      order[half][4 * j] = base;                                      // row 4i:   lo, pair 2i
      order[half][4 * j + 1] = static_cast<uint8_t>(64 + base);       // row 4i+1: hi, pair 2i
      order[half][4 * j + 2] = static_cast<uint8_t>(base + 16);       // row 4i+2: lo, pair 2i+1
      order[half][4 * j + 3] = static_cast<uint8_t>(64 + base + 16);  // row 4i+3: hi
    }
  const __m512i first = _mm512_load_si512(order[0]), second = _mm512_load_si512(order[1]);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int64_t t = t0; t < t1; ++t) {
    __m512 out = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
      const uint8_t* q = w.weights(t, kb);
      const float* s = w.scales(t, kb);
      const float* z = w.neg_scaled_zp(t, kb);
      _mm_prefetch(reinterpret_cast<const char*>(s) + kNBitsWeightsAhead / 4, _MM_HINT_T0);
      for (int64_t g = 0; g < w.block() / kGroup; ++g) {
        const int64_t gi = (kb * w.block()) / kGroup + g;
        const int8_t* a = r.q.data() + gi * kGroup;
        __m512i acc = _mm512_setzero_si512();
        for (int step = 0; step < kGroup / 8; ++step, q += 64, a += 8) {
          _mm_prefetch(reinterpret_cast<const char*>(q) + kNBitsWeightsAhead, _MM_HINT_T0);
          const __m512i bytes = _mm512_loadu_si512(q);
          const __m512i lo = _mm512_and_si512(bytes, nibble);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
          int32_t a0, a1;
          std::memcpy(&a0, a, 4);
          std::memcpy(&a1, a + 4, 4);
          acc = _mm512_dpbusd_epi32(acc, _mm512_permutex2var_epi8(lo, first, hi),
                                    _mm512_set1_epi32(a0));
          acc = _mm512_dpbusd_epi32(acc, _mm512_permutex2var_epi8(lo, second, hi),
                                    _mm512_set1_epi32(a1));
        }
        const float sa = r.scales[static_cast<size_t>(gi)];
        const int32_t sum = r.sums[static_cast<size_t>(gi)];
        if (z == nullptr)
          acc =
              _mm512_sub_epi32(acc, _mm512_set1_epi32(static_cast<int32_t>(w.uniform_zp()) * sum));
        out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc),
                              _mm512_mul_ps(_mm512_loadu_ps(s), _mm512_set1_ps(sa)), out);
        if (z != nullptr)
          out = _mm512_fmadd_ps(_mm512_loadu_ps(z), _mm512_set1_ps(sa * static_cast<float>(sum)),
                                out);
      }
    }
    const int64_t cols = std::min(kTile, w.n() - t * kTile);
    _mm512_mask_storeu_ps(y + t * kTile, static_cast<__mmask16>((1u << cols) - 1u), out);
  }
}
#endif

bool UseAvx2(NBitsPath path) {
#if defined(__x86_64__)
  return path != NBitsPath::kPortable && math::CpuHasAvx2Fma();
#else
  (void)path;
  return false;
#endif
}

// A zero padded to whole blocks, and its block sums.
void PadActivation(const PackedNBits& w, const float* a, std::vector<float>& a_pad,
                   std::vector<float>& sums) {
  a_pad.assign(static_cast<size_t>(w.k_blocks() * w.block()), 0.0f);
  std::memcpy(a_pad.data(), a, static_cast<size_t>(w.k()) * sizeof(float));
  sums.resize(static_cast<size_t>(w.k_blocks()));
  BlockSums(a_pad.data(), w.k_blocks(), w.block(), sums.data());
}

}  // namespace

PackedNBits::PackedNBits(const NBitsSource& src)
    : bits_(src.bits),
      n_(src.n),
      k_(src.k),
      block_(src.block),
      k_blocks_((src.k + src.block - 1) / src.block),
      tiles_((src.n + kTile - 1) / kTile),
      block_bytes_(kTile * src.block * src.bits / 8),
      uniform_zp_(static_cast<float>(1 << (src.bits - 1))) {
  q_.assign(static_cast<size_t>(tiles_ * k_blocks_ * block_bytes_), 0);
  scale_.assign(static_cast<size_t>(tiles_ * k_blocks_ * kTile), 0.0f);
  const bool zp_table = src.zp_packed != nullptr || src.zp_float != nullptr;
  if (zp_table) nszp_.assign(scale_.size(), 0.0f);
  for (int64_t n = 0; n < n_; ++n) {
    const int64_t t = n / kTile, j = n % kTile;
    for (int64_t kb = 0; kb < k_blocks_; ++kb) {
      const size_t at = static_cast<size_t>((t * k_blocks_ + kb) * kTile + j);
      scale_[at] = src.scales[n * k_blocks_ + kb];
      if (zp_table) nszp_[at] = -scale_[at] * SourceZp(src, n, kb, k_blocks_);
      uint8_t* dst = q_.data() + (t * k_blocks_ + kb) * block_bytes_;
      const int64_t rows = std::min(block_, k_ - kb * block_);
      for (int64_t i = 0; i < rows; ++i) {
        const uint8_t v = SourceQ(src, n, kb * block_ + i, k_blocks_);
        if (bits_ == 8)
          dst[i * kTile + j] = v;
        else
          dst[(i / 2) * kTile + j] |= static_cast<uint8_t>((i & 1) ? v << 4 : v);
      }
    }
  }
}

size_t PackedNBits::bytes() const {
  return q_.size() + (scale_.size() + nszp_.size()) * sizeof(float);
}

float NBitsWeight(const PackedNBits& w, int64_t k, int64_t n) {
  const int64_t t = n / kTile, j = n % kTile, kb = k / w.block(), i = k % w.block();
  const uint8_t* q = w.weights(t, kb);
  const int v = w.bits() == 8
                    ? q[i * kTile + j]
                    : ((i & 1) ? q[(i / 2) * kTile + j] >> 4 : q[(i / 2) * kTile + j] & 0xF);
  const size_t at = static_cast<size_t>(j);
  const float s = w.scales(t, kb)[at];
  const float* z = w.neg_scaled_zp(t, kb);
  return z != nullptr ? s * static_cast<float>(v) + z[at]
                      : s * (static_cast<float>(v) - w.uniform_zp());
}

void NBitsGemvTiles(const PackedNBits& w, const float* a_pad, const float* a_sums, float* y,
                    int64_t t0, int64_t t1, NBitsPath path) {
#if defined(__x86_64__)
  if ((path == NBitsPath::kAuto || path == NBitsPath::kAvx512) && math::CpuHasAvx512())
    return GemvRowsAvx512<1>(w, a_pad, a_sums, y, t0, t1);
  if (UseAvx2(path)) return GemvTilesAvx2(w, a_pad, a_sums, y, t0, t1);
#endif
  (void)path;
  GemvTilesPortable(w, a_pad, a_sums, y, t0, t1);
}

bool Int8Eligible(const PackedNBits& w) { return w.bits() == 4 && w.block() % kGroup == 0; }

namespace {

// The int8 scale of a[begin, end): max |a| / 127, or NaN when a value is NaN or infinite.
float GroupScale(const float* a, int64_t begin, int64_t end) {
  float amax = 0.0f;
  for (int64_t i = begin; i < end; ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<float>::quiet_NaN();
    amax = std::max(amax, std::abs(a[i]));
  }
  return amax / 127.0f;
}

// One group of kGroup values: its scale (NaN with a NaN or infinite value, then codes 0) and
// codes round(a / scale) (to nearest even, as nearbyint in the default rounding mode).
float QuantizeGroupPortable(const float* a, int64_t n, int8_t* q) {
  const float scale = GroupScale(a, 0, n);
  // No codes for a zero scale, nor for one so small (subnormal) that 1 / scale overflows.
  float inv = std::isfinite(scale) && scale != 0.0f ? 1.0f / scale : 0.0f;
  if (!std::isfinite(inv)) inv = 0.0f;
  for (int64_t i = 0; i < kGroup; ++i)
    q[i] = i < n && inv != 0.0f
               ? static_cast<int8_t>(std::clamp(std::nearbyint(a[i] * inv), -127.0f, 127.0f))
               : int8_t{0};
  return scale;
}

#if defined(__x86_64__)
// The same for a whole group on AVX-512F, bit for bit: the same max, the same product
// a * (1 / scale), cvtps rounding to nearest even; clamping in integers is clamping in float
// (the values are whole numbers). The activation rows of int4 decode and batched steps were
// 7-9% of a step in scalar code.
__attribute__((target("avx512f"))) float QuantizeGroupAvx512(const float* a, int8_t* q) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i x0 = _mm512_and_si512(_mm512_loadu_si512(a), magnitude);
  const __m512i x1 = _mm512_and_si512(_mm512_loadu_si512(a + 16), magnitude);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  if ((_mm512_cmpge_epu32_mask(x0, inf) | _mm512_cmpge_epu32_mask(x1, inf)) != 0) {
    std::memset(q, 0, kGroup);
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float amax =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_castsi512_ps(x0), _mm512_castsi512_ps(x1)));
  const float scale = amax / 127.0f;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  if (inverse == 0.0f || !std::isfinite(inverse)) {
    std::memset(q, 0, kGroup);
    return scale;
  }
  const __m512 inv = _mm512_set1_ps(inverse);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int h = 0; h < 2; ++h) {
    const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(a + 16 * h), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h),
                     _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(c, lo), hi)));
  }
  return scale;
}
#endif

}  // namespace

void QuantizeActivationsPortable(const float* a, int64_t k, int64_t k_pad, int8_t* q,
                                 float* scales) {
  // A NaN or infinite activation has no int8 code (casting NaN to int8 is undefined: a
  // libFuzzer finding, tests/fuzz/regressions/model/matmulnbits-nan-activation): its group
  // gets codes 0 and a NaN scale, so the group's products are NaN, as in float.
  for (int64_t g = 0; g < k_pad / kGroup; ++g) {
    const int64_t begin = g * kGroup;
    scales[g] =
        QuantizeGroupPortable(a + begin, std::clamp<int64_t>(k - begin, 0, kGroup), q + begin);
  }
}

void QuantizeActivations(const float* a, int64_t k, int64_t k_pad, int8_t* q, float* scales) {
#if defined(__x86_64__)
  if (math::CpuHasAvx512()) {
    const int64_t whole = std::min(k, k_pad) / kGroup;
    for (int64_t g = 0; g < whole; ++g)
      scales[g] = QuantizeGroupAvx512(a + g * kGroup, q + g * kGroup);
    const int64_t begin = whole * kGroup;
    return QuantizeActivationsPortable(a + begin, k - begin, k_pad - begin, q + begin,
                                       scales + whole);
  }
#endif
  QuantizeActivationsPortable(a, k, k_pad, q, scales);
}

void QuantizeActivationsWithSums(const float* a, int64_t k, int64_t k_pad, int8_t* q, float* scales,
                                 int32_t* sums) {
  QuantizeActivations(a, k, k_pad, q, scales);
  for (int64_t g = 0; g < k_pad / kGroup; ++g) {
    int32_t sum = 0;
    for (int64_t i = g * kGroup; i < (g + 1) * kGroup; ++i) sum += q[i];
    sums[g] = sum;
  }
}

void NBitsGemv(const PackedNBits& w, const float* a, float* y, NBitsPath path,
               NBitsCompute compute) {
  // Tasks of at least ~32 KiB of packed weights: less and scheduling costs show.
  const int64_t tile_bytes = w.k_blocks() * w.block() * kTile * w.bits() / 8;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, tile_bytes));
  if (compute == NBitsCompute::kInt8 && Int8Eligible(w)) {
    const Int8Row row = MakeInt8Row(w, a);
    math::ParallelFor(w.tiles(), grain, [&](int64_t t0, int64_t t1) {
#if defined(__x86_64__)
      if ((path == NBitsPath::kAuto || path == NBitsPath::kAvx512) && math::CpuHasAvx512VnniVbmi())
        return GemvInt8Vnni(w, row, y, t0, t1);
      if (UseAvx2(path)) return GemvInt8Avx2(w, row, y, t0, t1);
#endif
      GemvInt8Portable(w, row, y, t0, t1);
    });
    return;
  }
  std::vector<float> a_pad, sums;
  PadActivation(w, a, a_pad, sums);
  math::ParallelFor(w.tiles(), grain, [&](int64_t t0, int64_t t1) {
    NBitsGemvTiles(w, a_pad.data(), sums.data(), y, t0, t1, path);
  });
}

namespace {

// The 16 values -scale * zero point of tile t, block kb (computed when they are uniform).
void ZeroTerms(const PackedNBits& w, int64_t t, int64_t kb, float z[16]) {
  const float* s = w.scales(t, kb);
  const float* zt = w.neg_scaled_zp(t, kb);
  for (int j = 0; j < kTile; ++j) z[j] = zt != nullptr ? zt[j] : -w.uniform_zp() * s[j];
}

// Row i of block kb of tile t: the 16 quantized values as bytes.
void RowBytes(const PackedNBits& w, int64_t t, int64_t kb, int64_t i, uint8_t out[16]) {
  const uint8_t* q = w.weights(t, kb);
  if (w.bits() == 8) {
    std::memcpy(out, q + i * kTile, kTile);
    return;
  }
  const uint8_t* p = q + (i / 2) * kTile;
  for (int j = 0; j < kTile; ++j)
    out[j] = (i & 1) ? static_cast<uint8_t>(p[j] >> 4) : static_cast<uint8_t>(p[j] & 0xF);
}

void DequantizeRowPortable(const uint8_t q[16], const float* s, const float* z, float* row) {
  for (int j = 0; j < kTile; ++j) row[j] = s[j] * static_cast<float>(q[j]) + z[j];
}

#if defined(__x86_64__)
OL_AVX2 void DequantizeRowAvx2(const uint8_t q[16], const float* s, const float* z, float* row) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
  _mm256_storeu_ps(row, _mm256_fmadd_ps(_mm256_loadu_ps(s), lo, _mm256_loadu_ps(z)));
  _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), hi, _mm256_loadu_ps(z + 8)));
}
#endif

// Dequantizes W[k0 : k0 + kc, tiles t0 .. t0 + nt) into `out` in the SGEMM's packed panel
// layout (math::SgemmFromPanels): tile t at out + t * 16 * kc, row k at + (k - k0) * 16.
void DequantizeTiles(const PackedNBits& w, int64_t k0, int64_t kc, int64_t t0, int64_t nt,
                     float* out, NBitsPath path) {
  const bool avx2 = UseAvx2(path);
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t k = k0; k < k0 + kc;) {
      const int64_t kb = k / w.block(), end = std::min(k0 + kc, (kb + 1) * w.block());
      const float* s = w.scales(t0 + t, kb);
      float z[kTile];
      ZeroTerms(w, t0 + t, kb, z);
      for (; k < end; ++k) {
        uint8_t q[kTile];
        RowBytes(w, t0 + t, kb, k % w.block(), q);
        float* row = out + t * kTile * kc + (k - k0) * kTile;
#if defined(__x86_64__)
        if (avx2) {
          DequantizeRowAvx2(q, s, z, row);
          continue;
        }
#endif
        DequantizeRowPortable(q, s, z, row);
      }
    }
  (void)avx2;
}

}  // namespace

namespace {

// m rows (2..4) of float activations in one pass over the tiles (GemvRowsAvx512), each row's
// outputs those of NBitsGemv on that row; false (nothing done) without AVX-512 or when `path`
// asks for another kernel.
bool GemvRows(const PackedNBits& w, int64_t m, const float* a, float* c, NBitsPath path) {
#if defined(__x86_64__)
  if (!math::CpuHasAvx512() || (path != NBitsPath::kAuto && path != NBitsPath::kAvx512))
    return false;
  const int64_t width = w.k_blocks() * w.block();
  std::vector<float> pads(static_cast<size_t>(m * width), 0.0f),
      sums(static_cast<size_t>(m * w.k_blocks()));
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(pads.data() + r * width, a + r * w.k(), static_cast<size_t>(w.k()) * sizeof(float));
    BlockSums(pads.data() + r * width, w.k_blocks(), w.block(), sums.data() + r * w.k_blocks());
  }
  const int64_t tile_bytes = w.k_blocks() * w.block() * kTile * w.bits() / 8;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, tile_bytes));
  math::ParallelFor(w.tiles(), grain, [&](int64_t t0, int64_t t1) {
    if (m == 2) return GemvRowsAvx512<2>(w, pads.data(), sums.data(), c, t0, t1);
    if (m == 3) return GemvRowsAvx512<3>(w, pads.data(), sums.data(), c, t0, t1);
    GemvRowsAvx512<4>(w, pads.data(), sums.data(), c, t0, t1);
  });
  return true;
#else
  (void)w, (void)m, (void)a, (void)c, (void)path;
  return false;
#endif
}

}  // namespace

void NBitsGemm(const PackedNBits& w, int64_t m, const float* a, float* c, NBitsPath path,
               NBitsCompute compute) {
  const int64_t n = w.n(), k = w.k();
  const bool int8 = compute == NBitsCompute::kInt8 && path != NBitsPath::kPortable;
  const bool few_rows = m > 1 && int8 && (path == NBitsPath::kAuto || path == NBitsPath::kAvx512) &&
                        Int8Eligible(w) && NBitsGemmInt8FewRows(m);
  if (m <= 4 && !few_rows) {
    // A few rows: the GEMV reads the packed weights at memory speed, all rows in one pass
    // where the float GEMV serves them (GemvRows).
    if (m > 1 && !(compute == NBitsCompute::kInt8 && Int8Eligible(w)) && GemvRows(w, m, a, c, path))
      return;
    for (int64_t r = 0; r < m; ++r) NBitsGemv(w, a + r * k, c + r * n, path, compute);
    return;
  }
  if (int8 && NBitsGemmInt8(w, m, a, c)) return;
  // The SGEMM micro-kernel reads B as 16-column panels, the width of a weight tile: each
  // task dequantizes its tiles for one depth block straight into that layout (in L2, just
  // before use), so no float copy of the weight is made and none is packed again.
  static_assert(kTile == math::kPanelColumns);
  math::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = k;
  g.c = c;
  g.ldc = n;
  math::SgemmFromPanels(g, [&](int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out) {
    const int64_t t0 = j0 / kTile, nt = (j1 + kTile - 1) / kTile - t0;
    DequantizeTiles(w, p0, kc, t0, nt, out, path);
  });
}

}  // namespace onnx_light::ops::contrib
