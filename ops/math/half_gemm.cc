#include "ops/math/half_gemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/dtype.h"
#include "executor/parallel.h"
#include "ops/math/cpu_features.h"
#include "ops/math/gemm.h"
#include "ops/math/half_convert.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

namespace {

constexpr int64_t kMaxChunk = 512;      // columns per task: M rows of partial sums stay in L1
constexpr int64_t kAheadHalves = 1024;  // the panel GEMV's prefetch distance: 2 KiB

// acc[r][0, w) = sum over p of a[r][p] * B[p][j0 + ...] for the M rows of A, in row order
// with fused multiply-adds (the vector kernels' bits).
template <int M>
void GemvChunkPortable(const float* a, int64_t k, const uint16_t* b, int64_t n, int64_t j0,
                       int64_t w, float (*acc)[kMaxChunk]) {
  for (int r = 0; r < M; ++r) std::fill(acc[r], acc[r] + w, 0.0f);
  for (int64_t p = 0; p < k; ++p) {
    const uint16_t* row = b + p * n + j0;
    for (int64_t j = 0; j < w; ++j) {
      const float v = core::HalfToFloat(row[j]);
      for (int r = 0; r < M; ++r) acc[r][j] = std::fma(a[r * k + p], v, acc[r][j]);
    }
  }
}

#if defined(__x86_64__)
#define OL_F16C __attribute__((target("avx2,fma,f16c")))

OL_F16C inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The same, 8 columns at a time (w a multiple of 8; the caller runs the rest of the columns
// portably), each column's sum in row order.
template <int M>
OL_F16C void GemvChunkF16c(const float* a, int64_t k, const uint16_t* b, int64_t n, int64_t j0,
                           int64_t w, float (*acc)[kMaxChunk]) {
  for (int r = 0; r < M; ++r) std::fill(acc[r], acc[r] + w, 0.0f);
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    const uint16_t* r0 = b + p * n + j0;
    const uint16_t* r1 = r0 + n;
    __m256 a0[M], a1[M];
    for (int r = 0; r < M; ++r) {
      a0[r] = _mm256_set1_ps(a[r * k + p]);
      a1[r] = _mm256_set1_ps(a[r * k + p + 1]);
    }
    for (int64_t j = 0; j < w; j += 8) {
      const __m256 v0 = Load8(r0 + j), v1 = Load8(r1 + j);
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) {
        __m256 c = _mm256_loadu_ps(acc[r] + j);
        c = _mm256_fmadd_ps(a0[r], v0, c);
        c = _mm256_fmadd_ps(a1[r], v1, c);
        _mm256_storeu_ps(acc[r] + j, c);
      }
    }
  }
  for (; p < k; ++p) {
    const uint16_t* r0 = b + p * n + j0;
    for (int64_t j = 0; j < w; j += 8) {
      const __m256 v0 = Load8(r0 + j);
      for (int r = 0; r < M; ++r)
        _mm256_storeu_ps(acc[r] + j, _mm256_fmadd_ps(_mm256_set1_ps(a[r * k + p]), v0,
                                                     _mm256_loadu_ps(acc[r] + j)));
    }
  }
}
#endif

template <int M>
void HalfGemv(const float* a, int64_t k, const uint16_t* b, int64_t n, float* y) {
  // Chunks of at least 64 columns, as many as make two per thread.
  const int64_t threads = core::runtime::IntraOpThreads();
  const int64_t chunk = std::clamp<int64_t>((n / (2 * threads) + 15) / 16 * 16, 64, kMaxChunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  core::runtime::ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    alignas(32) float acc[M][kMaxChunk];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * chunk, w = std::min(n, j0 + chunk) - j0;
      int64_t vec = 0;
#if defined(__x86_64__)
      if (CpuHasAvx2FmaF16c()) {
        vec = w / 8 * 8;
        if (vec > 0) GemvChunkF16c<M>(a, k, b, n, j0, vec, acc);
      }
#endif
      if (vec < w) {  // the last columns (all of them without F16C)
        float rest[M][kMaxChunk];
        GemvChunkPortable<M>(a, k, b, n, j0 + vec, w - vec, rest);
        for (int r = 0; r < M; ++r) std::copy(rest[r], rest[r] + (w - vec), acc[r] + vec);
      }
      for (int r = 0; r < M; ++r) std::copy(acc[r], acc[r] + w, y + r * n + j0);
    }
  });
}

// ---- Over a PackedHalfB: each task streams a run of whole panels. ----

// y[r][16 q ..] for panels [q0, q1) (their valid columns).
template <int M>
void PanelsPortable(const float* a, const PackedHalfB& b, int64_t q0, int64_t q1, float* y) {
  const int64_t k = b.k(), n = b.n();
  for (int64_t q = q0; q < q1; ++q) {
    float acc[M][16] = {};
    const uint16_t* panel = b.panel(q);
    for (int64_t p = 0; p < k; ++p)
      for (int j = 0; j < 16; ++j) {
        const float v = core::HalfToFloat(panel[p * 16 + j]);
        for (int r = 0; r < M; ++r) acc[r][j] = std::fma(a[r * k + p], v, acc[r][j]);
      }
    const int64_t w = std::min<int64_t>(16, n - 16 * q);
    for (int r = 0; r < M; ++r) std::copy(acc[r], acc[r] + w, y + r * n + 16 * q);
  }
}

#if defined(__x86_64__)
// P panels side by side (independent sums to overlap), each column's sum in the row order
// of GemvChunkF16c: the same bits as the row-major GEMV.
template <int M, int P>
OL_F16C void PanelGroupF16c(const float* a, const PackedHalfB& b, int64_t q, float* y) {
  const int64_t k = b.k(), n = b.n();
  __m256 acc[P][2][M];
  for (int u = 0; u < P; ++u)
    for (int r = 0; r < M; ++r) acc[u][0][r] = acc[u][1][r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m256 av[M];
    for (int r = 0; r < M; ++r) av[r] = _mm256_set1_ps(a[r * k + p]);
#pragma GCC unroll 2
    for (int u = 0; u < P; ++u) {
      const uint16_t* row = b.panel(q + u) + p * 16;
      // Each line (two rows) asked for 2 KiB ahead: the hardware prefetcher alone keeps too
      // few misses in flight for this little work per byte (as in MatMulNBits' GEMV).
      if ((p & 1) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(row + kAheadHalves), _MM_HINT_T0);
      const __m256 vl = Load8(row), vh = Load8(row + 8);
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) {
        acc[u][0][r] = _mm256_fmadd_ps(av[r], vl, acc[u][0][r]);
        acc[u][1][r] = _mm256_fmadd_ps(av[r], vh, acc[u][1][r]);
      }
    }
  }
  for (int u = 0; u < P; ++u) {
    const int64_t w = std::min<int64_t>(16, n - 16 * (q + u));
    for (int r = 0; r < M; ++r) {
      alignas(32) float out[16];
      _mm256_store_ps(out, acc[u][0][r]);
      _mm256_store_ps(out + 8, acc[u][1][r]);
      std::copy(out, out + w, y + r * n + 16 * (q + u));
    }
  }
}

template <int M>
OL_F16C void PanelsF16c(const float* a, const PackedHalfB& b, int64_t q0, int64_t q1, float* y) {
  int64_t q = q0;
  for (; q + 2 <= q1; q += 2) PanelGroupF16c<M, 2>(a, b, q, y);
  if (q < q1) PanelGroupF16c<M, 1>(a, b, q, y);
}
#endif

template <int M>
void PackedGemv(const float* a, const PackedHalfB& b, float* y) {
  // Runs of whole panels, at least two per thread.
  const int64_t panels = b.panels();
  const int64_t runs = std::min<int64_t>(panels, 2 * core::runtime::IntraOpThreads());
  core::runtime::ParallelFor(runs, 1, [&](int64_t r0, int64_t r1) {
    const int64_t q0 = r0 * panels / runs, q1 = r1 * panels / runs;
#if defined(__x86_64__)
    if (CpuHasAvx2FmaF16c()) return PanelsF16c<M>(a, b, q0, q1, y);
#endif
    PanelsPortable<M>(a, b, q0, q1, y);
  });
}

}  // namespace

PackedHalfB::PackedHalfB(const uint16_t* b, int64_t k, int64_t n, int64_t transposed_ld)
    : k_(k), n_(n), data_(new uint16_t[static_cast<size_t>(panels() * k * 16)]()) {
  core::runtime::ParallelFor(panels(), 16, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t w = std::min<int64_t>(16, n - 16 * q);
      uint16_t* out = data_.get() + q * k * 16;
      if (transposed_ld > 0) {
        // Column 16q + c of B is row 16q + c of b: read along it, write every 16th element
        // of the panel (k * 32 bytes, in cache).
        for (int64_t c = 0; c < w; ++c) {
          const uint16_t* row = b + (16 * q + c) * transposed_ld;
          for (int64_t p = 0; p < k; ++p) out[p * 16 + c] = row[p];
        }
      } else {
        for (int64_t p = 0; p < k; ++p)
          std::copy(b + p * n + 16 * q, b + p * n + 16 * q + w, out + p * 16);
      }
    }
  });
}

namespace {

// Y[M, N] = A B: up to kHalfGemvMaxRows rows through gemv(std::integral_constant<int, M>),
// more through the packed SGEMM on the panels `source` converts.
template <class Gemv>
void GemvOrPanels(const float* a, int64_t m, int64_t k, int64_t n, float* y, const Gemv& gemv,
                  const BPanelSource& source) {
  switch (m) {
    case 1:
      return gemv(std::integral_constant<int, 1>{});
    case 2:
      return gemv(std::integral_constant<int, 2>{});
    case 3:
      return gemv(std::integral_constant<int, 3>{});
    case 4:
      return gemv(std::integral_constant<int, 4>{});
    default:
      break;
  }
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = k;
  g.c = y;
  g.ldc = n;
  SgemmFromPanels(g, source);
}

}  // namespace

void HalfWeightGemm(const float* a, int64_t m, const PackedHalfB& b, float* y) {
  if (m <= 0 || b.n() <= 0) return;
  GemvOrPanels(
      a, m, b.k(), b.n(), y, [&](auto rows) { PackedGemv<decltype(rows)::value>(a, b, y); },
      [&](int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out) {
        for (int64_t q = j0 / 16; q * 16 < j1; ++q)
          HalvesToFloats(b.panel(q) + p0 * 16, out + (q - j0 / 16) * 16 * kc, kc * 16);
      });
}

void HalfWeightGemm(const float* a, int64_t m, int64_t k, const uint16_t* b, int64_t n, float* y) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::fill(y, y + m * n, 0.0f);
    return;
  }
  GemvOrPanels(
      a, m, k, n, y, [&](auto rows) { HalfGemv<decltype(rows)::value>(a, k, b, n, y); },
      [&](int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out) {
        for (int64_t q = 0; j0 + q * kPanelColumns < j1; ++q) {
          const int64_t c = j0 + q * kPanelColumns, w = std::min(kPanelColumns, j1 - c);
          float* panel = out + q * kPanelColumns * kc;
          for (int64_t p = 0; p < kc; ++p)
            HalvesToFloats(b + (p0 + p) * n + c, panel + p * kPanelColumns, w);
        }
      });
}

}  // namespace onnx_light::ops::math
