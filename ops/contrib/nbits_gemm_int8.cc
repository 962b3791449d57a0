// MatMulNBits of several rows (prompts, and with VBMI the 2-8 rows of a batched decode step)
// with int8 activations (accuracy_level 4) on AVX-512 VNNI.
// Each row of A is quantized exactly as the int8 GEMV quantizes its one row
// (QuantizeActivations: a scale per 32 values), each tile's 4-bit weights are unpacked once
// per task into VNNI order (per column, 4 consecutive rows of K in one 32-bit lane), and
// vpdpbusd multiplies 16 columns x 4 rows per instruction for 4 rows of A at a time. The
// integer sums and the float epilogue (per 32-value group: fma(float(dot - zp * sum),
// scale * s_a, out), then the zero-point term) are those of the GEMV, so every row equals
// the kInt8 GEMV of that row bit for bit (tested), at a fraction of the float path's cost.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/contrib/nbits_gemm.h"
#include "ops/math/common.h"
#include "ops/math/cpu_features.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::contrib {

#if defined(__x86_64__)
namespace {

constexpr int64_t kTile = kNBitsTile;
constexpr int64_t kGroup = kInt8Group;
constexpr int kRows = 4;  // rows of A per register block
// Up to this many rows (a batched decode step), each tile is unpacked in registers once for
// all rows (PackedTileRows) instead of into a buffer (UnpackTile, then TileRows).
constexpr int64_t kPackedRows = 8;

// A's rows as int8 (k_pad per row), with a scale and the sum of q per group of 32.
struct Int8Rows {
  int64_t k_pad = 0, groups = 0;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

Int8Rows QuantizeRows(const PackedNBits& w, int64_t m, const float* a) {
  Int8Rows rows;
  rows.k_pad = w.k_blocks() * w.block();
  rows.groups = rows.k_pad / kGroup;
  rows.q.resize(static_cast<size_t>(m * rows.k_pad));
  rows.scales.resize(static_cast<size_t>(m * rows.groups));
  rows.sums.resize(static_cast<size_t>(m * rows.groups));
  math::ParallelFor(m, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      QuantizeActivationsWithSums(a + r * w.k(), w.k(), rows.k_pad, rows.q.data() + r * rows.k_pad,
                                  rows.scales.data() + r * rows.groups,
                                  rows.sums.data() + r * rows.groups);
  });
  return rows;
}

#define OL_VNNI __attribute__((target("avx512f,avx512vnni")))

// Tile t's 4-bit weights in VNNI order: for rows 4i..4i+3 of K, 64 bytes, column j's four
// values (0..15) in bytes 4j..4j+3. The packed layout (nbits_gemm.h) holds each row pair as
// 16 bytes, low nibble the first row: two pairs make one 64-byte step.
OL_VNNI void UnpackTile(const PackedNBits& w, int64_t t, uint8_t* out) {
  const __m128i nibble = _mm_set1_epi8(0x0F);
  for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
    const uint8_t* q = w.weights(t, kb);
    for (int64_t quad = 0; quad < w.block() / 4; ++quad, q += 32, out += 64) {
      const __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
      const __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
      const __m128i lo0 = _mm_and_si128(p0, nibble),
                    hi0 = _mm_and_si128(_mm_srli_epi16(p0, 4), nibble);
      const __m128i lo1 = _mm_and_si128(p1, nibble),
                    hi1 = _mm_and_si128(_mm_srli_epi16(p1, 4), nibble);
      const __m128i a = _mm_unpacklo_epi8(lo0, hi0), b = _mm_unpackhi_epi8(lo0, hi0);
      const __m128i c = _mm_unpacklo_epi8(lo1, hi1), d = _mm_unpackhi_epi8(lo1, hi1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(a, c));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_unpackhi_epi16(a, c));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32), _mm_unpacklo_epi16(b, d));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 48), _mm_unpackhi_epi16(b, d));
    }
  }
}

#define OL_VNNI_INLINE OL_VNNI __attribute__((always_inline)) inline

// The four activation bytes at `at` of rows r0 .. r0 + R times one 64-weight step `wq`,
// added to the rows' integer sums.
template <int R>
OL_VNNI_INLINE void DotStep(const Int8Rows& a, int64_t r0, int64_t at, __m512i wq, __m512i* acc) {
  for (int r = 0; r < R; ++r) {
    int32_t four;
    std::memcpy(&four, a.q.data() + (r0 + r) * a.k_pad + at, 4);
    acc[r] = _mm512_dpbusd_epi32(acc[r], wq, _mm512_set1_epi32(four));
  }
}

// Group gi's integer sums in float: out[r] += float(acc[r] - zp * sum) * (s * s_a) (+ the
// scaled zero points z * s_a * sum), the GEMV's epilogue and operation order.
template <int R>
OL_VNNI_INLINE void AddGroup(const PackedNBits& w, const Int8Rows& a, int64_t r0, int64_t gi,
                             const __m512i* acc, __m512 s, const float* zp, __m512 z, __m512* out) {
  for (int r = 0; r < R; ++r) {
    const size_t at = static_cast<size_t>((r0 + r) * a.groups + gi);
    const float sa = a.scales[at];
    const int32_t sum = a.sums[at];
    __m512i d = acc[r];
    if (zp == nullptr)
      d = _mm512_sub_epi32(d, _mm512_set1_epi32(static_cast<int32_t>(w.uniform_zp()) * sum));
    out[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, _mm512_set1_ps(sa)), out[r]);
    if (zp != nullptr)
      out[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(sa * static_cast<float>(sum)), out[r]);
  }
}

// Rows r0 .. r0 + R of C at tile t's columns (the last tile may be narrower).
template <int R>
OL_VNNI_INLINE void StoreRows(const PackedNBits& w, int64_t t, int64_t r0, const __m512* out,
                              float* c) {
  const int64_t cols = std::min(kTile, w.n() - t * kTile);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(c + (r0 + r) * w.n() + t * kTile, mask, out[r]);
}

// C[r0 .. r0 + R) x tile t's columns from the unpacked tile `wv`.
template <int R>
OL_VNNI void TileRows(const PackedNBits& w, int64_t t, const uint8_t* wv, const Int8Rows& a,
                      int64_t r0, float* c) {
  __m512 out[R];
  for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
  const int64_t per_block = w.block() / kGroup;
  for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
    const __m512 s = _mm512_loadu_ps(w.scales(t, kb));
    const float* zp = w.neg_scaled_zp(t, kb);
    const __m512 z = zp != nullptr ? _mm512_loadu_ps(zp) : _mm512_setzero_ps();
    for (int64_t g = 0; g < per_block; ++g) {
      const int64_t gi = kb * per_block + g;
      __m512i acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
      const uint8_t* wg = wv + gi * kGroup * kTile;
      for (int step = 0; step < kGroup / 4; ++step)
        DotStep<R>(a, r0, gi * kGroup + step * 4, _mm512_loadu_si512(wg + step * 64), acc);
      AddGroup<R>(w, a, r0, gi, acc, s, zp, z, out);
    }
  }
  StoreRows<R>(w, t, r0, out, c);
}

#define OL_VNNI_VBMI __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi")))

// 64 weights of K rows 4i..4i+3 (two packed row pairs, 32 bytes at q) in VNNI order, in a
// register: [low nibbles | high nibbles] holds rows k, k+2, k+1, k+3 as 16-byte quarters,
// and one byte permute (`order`) gathers column j's four rows into lane j.
OL_VNNI_VBMI inline __m512i VnniQuad(const uint8_t* q, __m512i order) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(x, nibble);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
  return _mm512_permutexvar_epi8(order, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

OL_VNNI_VBMI __m512i VnniOrder() {
  alignas(64) uint8_t index[64];
  const uint8_t quarter[4] = {0, 32, 16, 48};  // rows k, k+1, k+2, k+3 in VnniQuad's input
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 4; ++i) index[4 * j + i] = static_cast<uint8_t>(quarter[i] + j);
  return _mm512_load_si512(index);
}

// C[r0 .. r0 + R) x tile t's columns straight from the packed tile: each 64-weight step is
// unpacked once in a register and used for all R rows (a few rows of a batched decode step:
// UnpackTile's store and reload cost as much as the products there). The integer sums and
// the epilogue are TileRows' (DotStep, AddGroup), so the results are the same bit for bit.
template <int R>
OL_VNNI_VBMI void PackedTileRows(const PackedNBits& w, int64_t t, const Int8Rows& a, int64_t r0,
                                 float* c) {
  const __m512i order = VnniOrder();
  __m512 out[R];
  for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
  const int64_t per_block = w.block() / kGroup;
  for (int64_t kb = 0; kb < w.k_blocks(); ++kb) {
    const __m512 s = _mm512_loadu_ps(w.scales(t, kb));
    const float* zp = w.neg_scaled_zp(t, kb);
    const __m512 z = zp != nullptr ? _mm512_loadu_ps(zp) : _mm512_setzero_ps();
    const uint8_t* q = w.weights(t, kb);
    _mm_prefetch(reinterpret_cast<const char*>(w.scales(t, kb)) + kNBitsWeightsAhead / 4,
                 _MM_HINT_T0);
    for (int64_t g = 0; g < per_block; ++g) {
      const int64_t gi = kb * per_block + g;
      __m512i acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
      for (int step = 0; step < kGroup / 4; ++step, q += 32) {
        if (step % 2 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(q) + kNBitsWeightsAhead, _MM_HINT_T0);
        DotStep<R>(a, r0, gi * kGroup + step * 4, VnniQuad(q, order), acc);
      }
      AddGroup<R>(w, a, r0, gi, acc, s, zp, z, out);
    }
  }
  StoreRows<R>(w, t, r0, out, c);
}

// Rows [r, r + n) of tile t, n <= kPackedRows, on PackedTileRows.
OL_VNNI_VBMI void PackedTile(const PackedNBits& w, int64_t t, const Int8Rows& a, int64_t r,
                             int64_t n, float* c) {
  switch (n) {
    case 8:
      return PackedTileRows<8>(w, t, a, r, c);
    case 7:
      return PackedTileRows<7>(w, t, a, r, c);
    case 6:
      return PackedTileRows<6>(w, t, a, r, c);
    case 5:
      return PackedTileRows<5>(w, t, a, r, c);
    case 4:
      return PackedTileRows<4>(w, t, a, r, c);
    case 3:
      return PackedTileRows<3>(w, t, a, r, c);
    case 2:
      return PackedTileRows<2>(w, t, a, r, c);
    case 1:
      return PackedTileRows<1>(w, t, a, r, c);
    default:
      return;
  }
}

OL_VNNI void Tiles(const PackedNBits& w, int64_t m, const Int8Rows& a, float* c, int64_t t0,
                   int64_t t1) {
  std::vector<uint8_t> wv(static_cast<size_t>(a.k_pad * kTile));
  for (int64_t t = t0; t < t1; ++t) {
    UnpackTile(w, t, wv.data());
    int64_t r = 0;
    for (; r + kRows <= m; r += kRows) TileRows<kRows>(w, t, wv.data(), a, r, c);
    switch (m - r) {
      case 3:
        TileRows<3>(w, t, wv.data(), a, r, c);
        break;
      case 2:
        TileRows<2>(w, t, wv.data(), a, r, c);
        break;
      case 1:
        TileRows<1>(w, t, wv.data(), a, r, c);
        break;
      default:
        break;
    }
  }
}

}  // namespace

bool NBitsGemmInt8(const PackedNBits& w, int64_t m, const float* a, float* c) {
  if (!Int8Eligible(w) || !math::CpuHasAvx512Vnni() || m <= 0) return false;
  const Int8Rows rows = QuantizeRows(w, m, a);
  if (m <= kPackedRows && math::CpuHasAvx512VnniVbmi()) {
    // Tasks of at least ~32 KiB of packed weights, as the GEMV's.
    const int64_t grain =
        std::max<int64_t>(1, 32768 / std::max<int64_t>(1, rows.k_pad * kTile / 2));
    math::ParallelFor(w.tiles(), grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) PackedTile(w, t, rows, 0, m, c);
    });
    return true;
  }
  math::ParallelFor(w.tiles(), 1, [&](int64_t t0, int64_t t1) { Tiles(w, m, rows, c, t0, t1); });
  return true;
}

bool NBitsGemmInt8FewRows(int64_t m) { return m <= kPackedRows && math::CpuHasAvx512VnniVbmi(); }
#else
bool NBitsGemmInt8(const PackedNBits&, int64_t, const float*, float*) { return false; }
bool NBitsGemmInt8FewRows(int64_t) { return false; }
#endif

}  // namespace onnx_light::ops::contrib
