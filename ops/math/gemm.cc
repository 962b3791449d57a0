#include "ops/math/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "ops/math/common.h"
#include "ops/math/vector_ops.h"
#include "ops/math/weight_slab.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define OL_HAVE_X86 1
#define OL_AVX2 __attribute__((target("avx2,fma")))
#define OL_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace onnx_light::ops::math {

namespace {

// Set while SgemmOnThisThread runs: the product spawns no task.
thread_local bool serial_here = false;

template <typename F>
void Split(int64_t n, int64_t grain, const F& fn) {
  if (!serial_here) return ParallelFor(n, grain, fn);
  if (n > 0) fn(int64_t{0}, n);
}

int64_t Workers() { return serial_here ? 1 : core::runtime::IntraOpThreads(); }

std::atomic<uint64_t> b_packs{0};

// Register tile: up to kMaxMr rows x kNr columns of C per micro-kernel call; the row count
// of a full tile depends on the ISA (6 with 16 AVX2/SSE registers, 12 with 32 AVX-512
// ones). kNr (one AVX-512 register, two AVX2 ones) is the same for all, so a PackedB serves
// every path. Cache blocks:
constexpr int64_t kNr = 16;
constexpr int64_t kMaxMr = 12;
constexpr int64_t kKc = 256;  // depth of one packed panel pair (A panel 12 KB, B panel 16 KB)
constexpr int64_t kMc = 144;  // rows of A per task (a multiple of every tile height)
constexpr int64_t kNc = 256;  // columns of B per task at most (multiple of kNr)

// Where a micro-kernel puts its tile (rows x nr of C at c, leading dimension ldc):
//   C = alpha * tile                 when !load_c (C is not read: it may hold NaN),
//   C = alpha * tile + c_scale * C   when load_c (c_scale is beta on the first depth block,
//                                    1 on later ones; 1 skips the multiply).
// Fusing this into the kernel (the accumulators go straight to C, masked in the last
// partial panel) saves the round trip through a tile buffer.
struct TileOut {
  float* c;
  int64_t ldc;
  int64_t nr;  // valid columns, 1..kNr
  float alpha;
  float c_scale;
  bool load_c;
};

// C tile update from a tile buffer (tile[i * kNr + j]): the portable path's epilogue, and
// the AVX2 one for a partial panel.
inline void StoreTile(const float* tile, int64_t rows, const TileOut& o) {
  for (int64_t i = 0; i < rows; ++i) {
    float* crow = o.c + i * o.ldc;
    const float* t = tile + i * kNr;
    if (!o.load_c) {
      for (int64_t j = 0; j < o.nr; ++j) crow[j] = o.alpha * t[j];
    } else if (o.c_scale == 1.0f) {
      for (int64_t j = 0; j < o.nr; ++j) crow[j] += o.alpha * t[j];
    } else {
      for (int64_t j = 0; j < o.nr; ++j) crow[j] = o.alpha * t[j] + o.c_scale * crow[j];
    }
  }
}

// tile[i][j] = sum_p ap[p * a_step + i] * bp[p * kNr + j] over kc packed steps, for the
// kernel's row count i < R (A panels hold a_step rows, zero padded), stored through `out`.
using MicroKernel = void (*)(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                             const TileOut& out);

// A micro-kernel family: `rows[r]` computes r rows (1 <= r <= mr) of a tile.
// A wide micro-kernel computes two adjacent panels at once (32 columns: out.nr up to
// 2 * kNr); the second panel's steps start b_step floats after the first's.
using WideMicroKernel = void (*)(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                                 int64_t b_step, const TileOut& out);

// A micro-kernel family: `rows[r]` computes r rows (1 <= r <= mr) of a tile, `wide[r]` (if
// not null) the same rows over two panels.
struct Kernels {
  int64_t mr;
  MicroKernel rows[kMaxMr + 1];
  WideMicroKernel wide[kMaxMr + 1];
};

// B's panels follow each other in memory (panel q of a depth block at q * kNr * kc), and a
// micro-kernel call reads its panels once, one 64-byte line per step and panel. A constant
// weight larger than the caches (decode rows, issue 15) comes from memory: with 8 rows
// the FMAs keep the out-of-order window full, few loads get ahead, and reading and
// computing no longer overlap (8 rows x 576 x 49152 took the sum of its 1-row read and its
// in-cache product). So each step also asks for the same line of the panel the next call
// reads, into L2 (the L1 stays for A and the current panels): one call's worth ahead,
// about the time it takes memory to deliver it. Past the last panel this names memory
// that may not be ours: a prefetch never faults.
inline void PrefetchB(const float* p) { __builtin_prefetch(p, 0, 2); }

// GCC/Clang generic vectors: 4 floats, lowered to whatever SIMD the target has (SSE2 on
// any x86-64, NEON on ARM) or to scalars.
typedef float V4 __attribute__((vector_size(16)));

inline V4 LoadV4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Always computes a 6-row tile (the A panels are zero padded), stores R rows.
template <int R>
void MicroKernelPortable(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                         const TileOut& out) {
  alignas(64) float tile[6 * kNr];
  // Two passes of 3 rows keep 12 vector accumulators (fits 16 SSE registers).
  for (int64_t half = 0; half < 2; ++half) {
    V4 acc[3][4] = {};
    const float* a = ap + half * 3;
    const float* b = bp;
    for (int64_t p = 0; p < kc; ++p) {
      if (half == 0) PrefetchB(b + kNr * kc);  // the next panel (see PrefetchB)
      const V4 b0 = LoadV4(b), b1 = LoadV4(b + 4), b2 = LoadV4(b + 8), b3 = LoadV4(b + 12);
      for (int i = 0; i < 3; ++i) {
        const V4 av = V4{} + a[i];
        acc[i][0] += av * b0;
        acc[i][1] += av * b1;
        acc[i][2] += av * b2;
        acc[i][3] += av * b3;
      }
      a += a_step;
      b += kNr;
    }
    std::memcpy(tile + half * 3 * kNr, acc, sizeof(acc));
  }
  StoreTile(tile, R, out);
}

constexpr Kernels kPortableKernels = {
    6,
    {nullptr, MicroKernelPortable<1>, MicroKernelPortable<2>, MicroKernelPortable<3>,
     MicroKernelPortable<4>, MicroKernelPortable<5>, MicroKernelPortable<6>, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr},
    {}};

#ifdef OL_HAVE_X86
// R rows x 16 columns in 2R ymm accumulators (R <= 6 leaves registers for B and A).
template <int R>
OL_AVX2 void MicroKernelAvx2(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                             const TileOut& out) {
  __m256 c0[R], c1[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  const int64_t next = kNr * kc;  // the next panel (see PrefetchB)
  for (int64_t p = 0; p < kc; ++p) {
    PrefetchB(bp + next);
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + i);
      c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
    }
    ap += a_step;
    bp += kNr;
  }
  if (out.nr < kNr) {  // the last, partial panel of N: through a tile buffer
    alignas(32) float tile[R * kNr];
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      _mm256_store_ps(tile + i * kNr, c0[i]);
      _mm256_store_ps(tile + i * kNr + 8, c1[i]);
    }
    StoreTile(tile, R, out);
    return;
  }
  const __m256 alpha = _mm256_set1_ps(out.alpha);
  const __m256 scale = _mm256_set1_ps(out.c_scale);
  const bool scaled = out.c_scale != 1.0f;
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* c = out.c + i * out.ldc;
    __m256 r0 = _mm256_mul_ps(alpha, c0[i]), r1 = _mm256_mul_ps(alpha, c1[i]);
    if (out.load_c) {
      __m256 x0 = _mm256_loadu_ps(c), x1 = _mm256_loadu_ps(c + 8);
      if (scaled) {
        x0 = _mm256_mul_ps(scale, x0);
        x1 = _mm256_mul_ps(scale, x1);
      }
      r0 = _mm256_add_ps(r0, x0);
      r1 = _mm256_add_ps(r1, x1);
    }
    _mm256_storeu_ps(c, r0);
    _mm256_storeu_ps(c + 8, r1);
  }
}

constexpr Kernels kAvx2Kernels = {
    6,
    {nullptr, MicroKernelAvx2<1>, MicroKernelAvx2<2>, MicroKernelAvx2<3>, MicroKernelAvx2<4>,
     MicroKernelAvx2<5>, MicroKernelAvx2<6>, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr},
    {}};

// R rows x 16 columns in R zmm accumulators; the A element is broadcast from memory. Fewer
// than 8 rows would leave the FMA units waiting on their 4-cycle latency: those tiles keep
// two accumulators per row (even and odd steps) and add them at the end. A partial panel
// is loaded and stored under a mask.
template <int R>
OL_AVX512 void MicroKernelAvx512(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                                 const TileOut& out) {
  constexpr bool kSplit = R < 8;
  __m512 c[R], d[kSplit ? R : 1];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) c[i] = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < (kSplit ? R : 1); ++i) d[i] = _mm512_setzero_ps();
  const int64_t next = kNr * kc;  // the next panel (see PrefetchB)
  int64_t p = 0;
  if constexpr (kSplit) {
    for (; p + 2 <= kc; p += 2) {
      PrefetchB(bp + next);
      PrefetchB(bp + next + kNr);
      const __m512 b0 = _mm512_load_ps(bp);
      const __m512 b1 = _mm512_load_ps(bp + kNr);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        c[i] = _mm512_fmadd_ps(_mm512_set1_ps(ap[i]), b0, c[i]);
        d[i] = _mm512_fmadd_ps(_mm512_set1_ps(ap[a_step + i]), b1, d[i]);
      }
      ap += 2 * a_step;
      bp += 2 * kNr;
    }
  }
  for (; p < kc; ++p) {
    PrefetchB(bp + next);
    const __m512 b = _mm512_load_ps(bp);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) c[i] = _mm512_fmadd_ps(_mm512_set1_ps(ap[i]), b, c[i]);
    ap += a_step;
    bp += kNr;
  }
  if constexpr (kSplit) {
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) c[i] = _mm512_add_ps(c[i], d[i]);
  }
  const __mmask16 mask = static_cast<__mmask16>(out.nr >= kNr ? 0xFFFFu : (1u << out.nr) - 1u);
  const __m512 alpha = _mm512_set1_ps(out.alpha);
  const __m512 scale = _mm512_set1_ps(out.c_scale);
  const bool scaled = out.c_scale != 1.0f;
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* crow = out.c + i * out.ldc;
    __m512 r = _mm512_mul_ps(alpha, c[i]);
    if (out.load_c) {
      __m512 x = _mm512_maskz_loadu_ps(mask, crow);
      if (scaled) x = _mm512_mul_ps(scale, x);
      r = _mm512_add_ps(r, x);
    }
    _mm512_mask_storeu_ps(crow, mask, r);
  }
}

// R rows x 32 columns (two panels) in 2R zmm accumulators: one broadcast of A feeds two
// FMAs and no FMA takes a memory operand, so a 12-row tile issues 24 FMAs per 14 loads
// instead of 12 per 13.
template <int R>
OL_AVX512 void WideMicroKernelAvx512(int64_t kc, const float* ap, int64_t a_step, const float* bp,
                                     int64_t b_step, const TileOut& out) {
  __m512 c0[R], c1[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  const float* bq = bp + b_step;
  const int64_t next = 2 * b_step;  // the next call's pair of panels
  for (int64_t p = 0; p < kc; ++p) {
    PrefetchB(bp + next);
    PrefetchB(bq + next);
    const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bq);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
    }
    ap += a_step;
    bp += kNr;
    bq += kNr;
  }
  const int64_t nr1 = out.nr - kNr;  // valid columns of the second panel, 1..16
  const __mmask16 mask1 = static_cast<__mmask16>(nr1 >= kNr ? 0xFFFFu : (1u << nr1) - 1u);
  const __m512 alpha = _mm512_set1_ps(out.alpha);
  const __m512 scale = _mm512_set1_ps(out.c_scale);
  const bool scaled = out.c_scale != 1.0f;
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* crow = out.c + i * out.ldc;
    __m512 r0 = _mm512_mul_ps(alpha, c0[i]), r1 = _mm512_mul_ps(alpha, c1[i]);
    if (out.load_c) {
      __m512 x0 = _mm512_loadu_ps(crow), x1 = _mm512_maskz_loadu_ps(mask1, crow + kNr);
      if (scaled) {
        x0 = _mm512_mul_ps(scale, x0);
        x1 = _mm512_mul_ps(scale, x1);
      }
      r0 = _mm512_add_ps(r0, x0);
      r1 = _mm512_add_ps(r1, x1);
    }
    _mm512_storeu_ps(crow, r0);
    _mm512_mask_storeu_ps(crow + kNr, mask1, r1);
  }
}

constexpr Kernels kAvx512Kernels = {
    12,
    {nullptr, MicroKernelAvx512<1>, MicroKernelAvx512<2>, MicroKernelAvx512<3>,
     MicroKernelAvx512<4>, MicroKernelAvx512<5>, MicroKernelAvx512<6>, MicroKernelAvx512<7>,
     MicroKernelAvx512<8>, MicroKernelAvx512<9>, MicroKernelAvx512<10>, MicroKernelAvx512<11>,
     MicroKernelAvx512<12>},
    {nullptr, WideMicroKernelAvx512<1>, WideMicroKernelAvx512<2>, WideMicroKernelAvx512<3>,
     WideMicroKernelAvx512<4>, WideMicroKernelAvx512<5>, WideMicroKernelAvx512<6>,
     WideMicroKernelAvx512<7>, WideMicroKernelAvx512<8>, WideMicroKernelAvx512<9>,
     WideMicroKernelAvx512<10>, WideMicroKernelAvx512<11>, WideMicroKernelAvx512<12>}};
#endif

const Kernels& SelectKernels(GemmPath path) {
#ifdef OL_HAVE_X86
  if (path == GemmPath::kPortable || !CpuHasAvx2Fma()) return kPortableKernels;
  if (path != GemmPath::kAvx2 && CpuHasAvx512()) return kAvx512Kernels;
  return kAvx2Kernels;
#else
  (void)path;
  return kPortableKernels;
#endif
}

bool UseAvx2(GemmPath path) { return path != GemmPath::kPortable && CpuHasAvx2Fma(); }

// n floats, 64-byte aligned (the SIMD kernels load packed B aligned); `storage` owns them.
float* AllocateAligned(int64_t n, std::unique_ptr<float[]>* storage) {
  storage->reset(new float[static_cast<size_t>(n) + 16]);
  const auto p = reinterpret_cast<uintptr_t>(storage->get());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

int64_t PaddedN(int64_t n) { return (n + kNr - 1) / kNr * kNr; }

// Depth of the blocks K is cut into: at most kKc, all about equal (K = 576 gives 3 x 192,
// not 256 + 256 + 64, whose short last block would pay a full C update for little work).
// A PackedB and every product over it use the same blocks.
int64_t DepthBlock(int64_t k) {
  const int64_t blocks = (k + kKc - 1) / kKc;
  return blocks <= 1 ? k : (k + blocks - 1) / blocks;
}

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into mr-row panels, zero padded: panel r holds
// rows i0 + r*mr .. +mr, element (p, i) at p * mr + i.
#ifdef OL_HAVE_X86
// Four rows of A (src, lda apart) into four adjacent lanes of a panel (panel[p * mr + i] =
// src[i * lda + p]), 4 x 8 blocks transposed in registers: columns [0, returned) done.
OL_AVX2 int64_t PackA4RowsAvx2(const float* src, int64_t lda, int64_t kc, int64_t mr,
                               float* panel) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    const __m256 r0 = _mm256_loadu_ps(src + p), r1 = _mm256_loadu_ps(src + lda + p);
    const __m256 r2 = _mm256_loadu_ps(src + 2 * lda + p), r3 = _mm256_loadu_ps(src + 3 * lda + p);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    // Column q of the block in the low half of u[q % 4] (q < 4) or its high half (q >= 4).
    const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                         _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
    float* d = panel + p * mr;
    for (int q = 0; q < 4; ++q) {
      _mm_storeu_ps(d + q * mr, _mm256_castps256_ps128(u[q]));
      _mm_storeu_ps(d + (q + 4) * mr, _mm256_extractf128_ps(u[q], 1));
    }
  }
  return p;
}
#endif

void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t mr,
           float* out) {
  for (int64_t r = 0; r < mc; r += mr) {
    const int64_t rows = std::min(mr, mc - r);
    float* panel = out + r * kc;
    if (!g.trans_a) {
      int64_t i = 0;
#ifdef OL_HAVE_X86
      if (CpuHasAvx2Fma()) {  // the same bits as the scalar copy, so for every path
        for (; i + 4 <= rows; i += 4) {
          const float* src = g.a + (i0 + r + i) * g.lda + p0;
          const int64_t done = PackA4RowsAvx2(src, g.lda, kc, mr, panel + i);
          for (int64_t ii = 0; ii < 4; ++ii)
            for (int64_t p = done; p < kc; ++p) panel[p * mr + i + ii] = src[ii * g.lda + p];
        }
      }
#endif
      for (; i < rows; ++i) {
        const float* src = g.a + (i0 + r + i) * g.lda + p0;
        for (int64_t p = 0; p < kc; ++p) panel[p * mr + i] = src[p];
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = g.a + (p0 + p) * g.lda + i0 + r;
        for (int64_t i = 0; i < rows; ++i) panel[p * mr + i] = src[i];
      }
    }
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t i = rows; i < mr; ++i) panel[p * mr + i] = 0.0f;
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j1) into kNr-column panels, zero padded: panel q (columns
// j0 + q*kNr ..) at out + q * kNr * kc, element (p, j) at p * kNr + j. Reads the source in
// its storage order (rows of B, or of B^T when transposed) so that it streams.
void PackB(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out) {
  const int64_t full_end = j0 + (j1 - j0) / kNr * kNr;
  if (!g.trans_b) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = g.b + (p0 + p) * g.ldb;
      float* dst = out + p * kNr;
      for (int64_t j = j0; j < full_end; j += kNr, dst += kNr * kc)
        std::memcpy(dst, src + j, kNr * sizeof(float));  // constant size: inlined
      if (full_end < j1) {
        const int64_t nr = j1 - full_end;
        std::memcpy(dst, src + full_end, static_cast<size_t>(nr) * sizeof(float));
        std::fill(dst + nr, dst + kNr, 0.0f);
      }
    }
    return;
  }
  for (int64_t q0 = j0; q0 < j1; q0 += kNr) {
    const int64_t nr = std::min(kNr, j1 - q0);
    float* panel = out + (q0 - j0) * kc;
    for (int64_t j = 0; j < nr; ++j) {
      const float* src = g.b + (q0 + j) * g.ldb + p0;
      for (int64_t p = 0; p < kc; ++p) panel[p * kNr + j] = src[p];
    }
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t j = nr; j < kNr; ++j) panel[p * kNr + j] = 0.0f;
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j1) into `out` from g.b, or has `source` write it.
void PackOrProduceB(const GemmArgs& g, const BPanelSource* source, int64_t p0, int64_t kc,
                    int64_t j0, int64_t j1, float* out) {
  if (source != nullptr) return (*source)(p0, kc, j0, j1, out);
  PackB(g, p0, kc, j0, j1, out);
}

// Packs every panel of op(B) depth block [p0, p0 + kc) into `out` (panel q at q * kNr * kc).
void PackBBlock(const GemmArgs& g, const BPanelSource* source, int64_t p0, int64_t kc, float* out) {
  const int64_t n_panels = (g.n + kNr - 1) / kNr;
  Split(n_panels, 8, [&](int64_t q0, int64_t q1) {
    PackOrProduceB(g, source, p0, kc, q0 * kNr, std::min(g.n, q1 * kNr), out + q0 * kNr * kc);
  });
}

// A 64-byte aligned per-thread buffer of at least n floats (kept between calls).
float* ThreadBuffer(int64_t n, int which) {
  struct Buffer {
    std::unique_ptr<float[]> storage;
    float* data = nullptr;
    int64_t size = 0;
  };
  thread_local Buffer buffers[2];
  Buffer& b = buffers[which];
  if (b.size < n) {
    b.data = AllocateAligned(n, &b.storage);
    b.size = n;
  }
  return b.data;
}

// What a micro-kernel call stores: rows [i, i + rows) x columns [j0, j0 + nr) of C, on the
// depth block that is `first` or not.
inline TileOut Out(const GemmArgs& g, int64_t i, int64_t j0, int64_t nr, bool first) {
  TileOut out;
  out.c = g.c + i * g.ldc + j0;
  out.ldc = g.ldc;
  out.nr = nr;
  out.alpha = g.alpha;
  out.c_scale = first ? g.beta : 1.0f;
  out.load_c = !first || g.beta != 0.0f;
  return out;
}

// Column blocks of at most kNc columns (a multiple of kNr), narrower when there are too few
// row blocks to give every thread two tasks.
int64_t ColumnBlock(const GemmArgs& g, int64_t m_blocks) {
  const int64_t want_tasks = 2 * Workers();
  int64_t nc = kNc;
  if (m_blocks >= want_tasks) {
    nc = PaddedN(g.n);  // enough row blocks: each task packs its A once per depth block
  } else if (m_blocks * ((g.n + nc - 1) / nc) < want_tasks) {
    const int64_t per_block = (want_tasks + m_blocks - 1) / m_blocks;
    nc = std::max<int64_t>(4 * kNr, ((g.n + per_block - 1) / per_block + kNr - 1) / kNr * kNr);
    nc = std::min(nc, kNc);
  }
  return nc;
}

// Rows [i0, i0 + mc) x columns [j_begin, j_end) of C over one depth block of kc steps:
// `a_block` holds the rows' packed A panels (panel of row i0 + r at a_block + r * kc),
// `b_block` the packed B panel of column j_begin (the next ones kNr * kc floats apart).
// Up to kNc columns, a row panel (mr x kc, in L1) meets every column panel in turn (the
// columns' panels, at most 256 KB, come from L2); wider blocks take a column panel (in L1)
// against every row panel instead, so that B is read once.
void BlockProduct(const GemmArgs& g, const Kernels& kernels, int64_t kc, const float* a_block,
                  int64_t i0, int64_t mc, const float* b_block, int64_t j_begin, int64_t j_end,
                  bool first) {
  const int64_t mr = kernels.mr;
  const bool wide = kernels.wide[1] != nullptr;
  const auto panel = [&](int64_t j0) { return b_block + (j0 - j_begin) * kc; };
  if (j_end - j_begin <= kNc) {
    for (int64_t r = 0; r < mc; r += mr) {
      const int64_t rows = std::min(mr, mc - r);
      const float* apanel = a_block + r * kc;
      int64_t j0 = j_begin;
      if (wide) {
        for (; j0 + kNr < j_end; j0 += 2 * kNr)  // two panels, the second maybe partial
          kernels.wide[rows](kc, apanel, mr, panel(j0), kNr * kc,
                             Out(g, i0 + r, j0, std::min(2 * kNr, j_end - j0), first));
      }
      for (; j0 < j_end; j0 += kNr)
        kernels.rows[rows](kc, apanel, mr, panel(j0),
                           Out(g, i0 + r, j0, std::min(kNr, j_end - j0), first));
    }
    return;
  }
  for (int64_t j0 = j_begin; j0 < j_end;) {
    const int64_t step = wide && j0 + kNr < j_end ? 2 * kNr : kNr;
    const int64_t nr = std::min(step, j_end - j0);
    for (int64_t r = 0; r < mc; r += mr) {
      const int64_t rows = std::min(mr, mc - r);
      if (step == kNr) {
        kernels.rows[rows](kc, a_block + r * kc, mr, panel(j0), Out(g, i0 + r, j0, nr, first));
      } else {
        kernels.wide[rows](kc, a_block + r * kc, mr, panel(j0), kNr * kc,
                           Out(g, i0 + r, j0, nr, first));
      }
    }
    j0 += step;
  }
}

// M <= kMc (prompts): A is packed once for every depth block, then one parallel loop over
// column blocks runs each block through the whole depth (one fork/join per call, not one
// per depth block; no serial packing while the other threads wait). Without `packed`, each
// task packs its own columns of B for one depth block just before use (each panel is used
// by one task only, and is still in L2 when the micro-kernel reads it).
void PackedGemmOneRowBlock(const GemmArgs& g, const PackedB* packed, const BPanelSource* source,
                           const Kernels& kernels) {
  const int64_t depth = DepthBlock(g.k);
  const int64_t blocks = (g.k + depth - 1) / depth;
  const int64_t mr = kernels.mr;
  const int64_t a_panels = (g.m + mr - 1) / mr;
  const int64_t padded_m = a_panels * mr;
  // Equal column blocks of at most kNc columns, their count a multiple of the thread count
  // (at least two per thread): a 1152-column product in 256-column blocks would leave one
  // thread 640 columns and the other 512.
  const int64_t workers = Workers();
  const int64_t n_panels = (g.n + kNr - 1) / kNr;
  int64_t n_blocks = std::max((n_panels * kNr + kNc - 1) / kNc, 2 * workers);
  n_blocks = std::min((n_blocks + workers - 1) / workers * workers, n_panels);
  const int64_t nc = (n_panels + n_blocks - 1) / n_blocks * kNr;
  n_blocks = (g.n + nc - 1) / nc;
  const bool pack_b_per_task = packed == nullptr;
  if (pack_b_per_task && source == nullptr) b_packs.fetch_add(1, std::memory_order_relaxed);
  // Depth block b of packed A at a + b * padded_m * depth, its panel r at + r * mr * kc.
  // Per call (a thread waiting in ParallelFor may run another call's tasks): from the
  // default allocator, which recycles large blocks.
  const std::shared_ptr<void> a_storage = core::runtime::DefaultAllocator().Allocate(
      static_cast<size_t>(padded_m * g.k) * sizeof(float));
  float* const a = static_cast<float*>(a_storage.get());
  auto pack_a = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / a_panels, r = t % a_panels;
      const int64_t p0 = b * depth, kc = std::min(depth, g.k - p0), i0 = r * mr;
      PackA(g, i0, std::min(mr, g.m - i0), p0, kc, mr, a + b * padded_m * depth + i0 * kc);
    }
  };
  // Packing A is cheap next to the product (K x M of M x K x N): split only large ones
  // (a 128 x 576 A packs in a few microseconds, about what a fork/join costs).
  constexpr int64_t kParallelPackFloats = 1 << 18;
  const int64_t a_items = blocks * a_panels;
  if (padded_m * g.k >= kParallelPackFloats && Workers() > 1) {
    Split(a_items, std::max<int64_t>(1, a_items / (4 * Workers())), pack_a);
  } else {
    pack_a(0, a_items);
  }
  Split(n_blocks, 1, [&](int64_t t0, int64_t t1) {
    float* b_buffer = pack_b_per_task ? ThreadBuffer(nc * kKc, 1) : nullptr;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j_begin = t * nc, j_end = std::min(g.n, j_begin + nc);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t p0 = b * depth, kc = std::min(depth, g.k - p0);
        if (b_buffer != nullptr) PackOrProduceB(g, source, p0, kc, j_begin, j_end, b_buffer);
        // The panel of column j_begin: the task's buffer, or its place in the packed block.
        const float* b_block = b_buffer != nullptr ? b_buffer : packed->block(p0) + j_begin * kc;
        BlockProduct(g, kernels, kc, a + b * padded_m * depth, 0, g.m, b_block, j_begin, j_end,
                     b == 0);
      }
    }
  });
}

// `packed` (may be null) holds op(B) already packed: depth block p0 at packed->block(p0).
// With a single block of rows see PackedGemmOneRowBlock. With more rows, each task packs
// its rows of A and B is packed once per depth block, shared.
// `source` (may be null, never with `packed`) produces B's panels instead of g.b.
void PackedGemm(const GemmArgs& g, const PackedB* packed, const BPanelSource* source,
                const Kernels& kernels) {
  const int64_t m_blocks = (g.m + kMc - 1) / kMc;
  if (m_blocks == 1) return PackedGemmOneRowBlock(g, packed, source, kernels);
  const int64_t depth = DepthBlock(g.k);
  const int64_t mr = kernels.mr;
  const int64_t nc = ColumnBlock(g, m_blocks);
  const int64_t n_blocks = (g.n + nc - 1) / nc;
  // Shared B may take MiBs: from the default allocator, which recycles large blocks instead
  // of page-faulting fresh ones in on every call.
  std::shared_ptr<void> b_storage;
  float* shared_b = nullptr;
  if (packed == nullptr) {
    if (source == nullptr) b_packs.fetch_add(1, std::memory_order_relaxed);
    b_storage = core::runtime::DefaultAllocator().Allocate(
        static_cast<size_t>(PaddedN(g.n) * depth) * sizeof(float));
    shared_b = static_cast<float*>(b_storage.get());
  }
  if (packed != nullptr) {
    // One parallel loop: each task runs its rows and columns through the whole depth,
    // packing its rows of A per depth block.
    Split(m_blocks * n_blocks, 1, [&](int64_t t0, int64_t t1) {
      float* a_buffer = ThreadBuffer(kMc * kKc, 0);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mb = t / n_blocks, nb = t % n_blocks;
        const int64_t i0 = mb * kMc, mc = std::min(kMc, g.m - i0);
        const int64_t j_begin = nb * nc, j_end = std::min(g.n, j_begin + nc);
        for (int64_t p0 = 0; p0 < g.k; p0 += depth) {
          const int64_t kc = std::min(depth, g.k - p0);
          PackA(g, i0, mc, p0, kc, mr, a_buffer);
          BlockProduct(g, kernels, kc, a_buffer, i0, mc, packed->block(p0) + j_begin * kc, j_begin,
                       j_end, p0 == 0);
        }
      }
    });
    return;
  }
  for (int64_t p0 = 0; p0 < g.k; p0 += depth) {
    const int64_t kc = std::min(depth, g.k - p0);
    PackBBlock(g, source, p0, kc, shared_b);
    Split(m_blocks * n_blocks, 1, [&](int64_t t0, int64_t t1) {
      float* a_buffer = ThreadBuffer(kMc * kKc, 0);
      int64_t packed_block = -1;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mb = t / n_blocks, nb = t % n_blocks;
        const int64_t i0 = mb * kMc, mc = std::min(kMc, g.m - i0);
        if (packed_block != mb) {
          PackA(g, i0, mc, p0, kc, mr, a_buffer);
          packed_block = mb;
        }
        const int64_t j_begin = nb * nc, j_end = std::min(g.n, j_begin + nc);
        BlockProduct(g, kernels, kc, a_buffer, i0, mc, shared_b + j_begin * kc, j_begin, j_end,
                     p0 == 0);
      }
    });
  }
}

// ---- GEMV: M == 1. B is streamed once, no packing; the work is split over N. ----

// y[j0:j1] = a . B[:, j0:j1] for row-major B (trans_b = false).
void GemvRowsPortable(const GemmArgs& g, int64_t j0, int64_t j1, float* acc) {
  const int64_t w = j1 - j0;
  std::fill(acc, acc + w, 0.0f);
  for (int64_t p = 0; p < g.k; ++p) {
    const float av = g.trans_a ? g.a[p * g.lda] : g.a[p];
    const float* brow = g.b + p * g.ldb + j0;
    for (int64_t j = 0; j < w; ++j) acc[j] += av * brow[j];
  }
}

// y[j] = a . B[j, :] for B stored [N, K] (trans_b = true): contiguous dot products.
float DotPortable(const float* a, int64_t a_stride, const float* b, int64_t k) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t p = 0;
  if (a_stride == 1) {
    for (; p + 4 <= k; p += 4) {
      s0 += a[p] * b[p];
      s1 += a[p + 1] * b[p + 1];
      s2 += a[p + 2] * b[p + 2];
      s3 += a[p + 3] * b[p + 3];
    }
  }
  for (; p < k; ++p) s0 += a[p * a_stride] * b[p];
  return (s0 + s1) + (s2 + s3);
}

#ifdef OL_HAVE_X86
OL_AVX2 void GemvRowsAvx2(const GemmArgs& g, int64_t j0, int64_t j1, float* acc) {
  const int64_t w = j1 - j0;
  std::fill(acc, acc + w, 0.0f);
  const int64_t a_stride = g.trans_a ? g.lda : 1;
  int64_t p = 0;
  for (; p + 4 <= g.k; p += 4) {
    const __m256 a0 = _mm256_set1_ps(g.a[p * a_stride]);
    const __m256 a1 = _mm256_set1_ps(g.a[(p + 1) * a_stride]);
    const __m256 a2 = _mm256_set1_ps(g.a[(p + 2) * a_stride]);
    const __m256 a3 = _mm256_set1_ps(g.a[(p + 3) * a_stride]);
    const float* b0 = g.b + p * g.ldb + j0;
    const float* b1 = b0 + g.ldb;
    const float* b2 = b1 + g.ldb;
    const float* b3 = b2 + g.ldb;
    int64_t j = 0;
    for (; j + 8 <= w; j += 8) {
      __m256 c = _mm256_loadu_ps(acc + j);
      c = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0 + j), c);
      c = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1 + j), c);
      c = _mm256_fmadd_ps(a2, _mm256_loadu_ps(b2 + j), c);
      c = _mm256_fmadd_ps(a3, _mm256_loadu_ps(b3 + j), c);
      _mm256_storeu_ps(acc + j, c);
    }
    for (; j < w; ++j)
      acc[j] += _mm256_cvtss_f32(a0) * b0[j] + _mm256_cvtss_f32(a1) * b1[j] +
                _mm256_cvtss_f32(a2) * b2[j] + _mm256_cvtss_f32(a3) * b3[j];
  }
  for (; p < g.k; ++p) {
    const float av = g.a[p * a_stride];
    const float* brow = g.b + p * g.ldb + j0;
    for (int64_t j = 0; j < w; ++j) acc[j] += av * brow[j];
  }
}

#endif

void Gemv(const GemmArgs& g, bool avx2) {
  auto finish = [&](float* c, const float* acc, int64_t w) {
    for (int64_t j = 0; j < w; ++j)
      c[j] = g.alpha * acc[j] + (g.beta == 0.0f ? 0.0f : g.beta * c[j]);
  };
  if (!g.trans_b) {
    constexpr int64_t kChunk = 512;  // columns per task: the accumulator stays in L1
    const int64_t chunks = (g.n + kChunk - 1) / kChunk;
    Split(chunks, 1, [&](int64_t c0, int64_t c1) {
      alignas(32) float acc[kChunk];
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t j0 = c * kChunk, j1 = std::min(g.n, j0 + kChunk);
#ifdef OL_HAVE_X86
        if (avx2) {
          GemvRowsAvx2(g, j0, j1, acc);
        } else {
          GemvRowsPortable(g, j0, j1, acc);
        }
#else
        GemvRowsPortable(g, j0, j1, acc);
#endif
        finish(g.c + j0, acc, j1 - j0);
      }
    });
    return;
  }
  const int64_t a_stride = g.trans_a ? g.lda : 1;
  Split(g.n, std::max<int64_t>(1, 65536 / std::max<int64_t>(g.k, 1)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      // Dense rows take the shared vector dot (ops/math/vector_ops.h).
      const float d = avx2 && a_stride == 1 ? Dot(g.a, g.b + j * g.ldb, g.k)
                                            : DotPortable(g.a, a_stride, g.b + j * g.ldb, g.k);
      finish(g.c + j, &d, 1);
    }
  });
}

// ---- GEMV over a PackedB: M == 1 with a constant weight. ----
// Panel q of depth block p0 is kc x 16 contiguous floats, and the panels of a block follow
// each other, so a task that owns a run of panels reads, per depth block, one sequential
// stream: the bandwidth-bound best case. Partial sums of the run's columns wait in `y` (in
// L1) between depth blocks.

// y[16 (q - q0) ..] (+)= a[p0 : p0 + kc] . panels [q0, q1) of depth block p0.
void GemvBlockPortable(const float* block, int64_t kc, const float* a, int64_t q0, int64_t q1,
                       bool first, float* y) {
  for (int64_t q = q0; q < q1; ++q) {
    float* acc = y + (q - q0) * kNr;
    if (first) std::fill(acc, acc + kNr, 0.0f);
    const float* panel = block + q * kNr * kc;
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t j = 0; j < kNr; ++j) acc[j] += a[p] * panel[p * kNr + j];
  }
}

#ifdef OL_HAVE_X86
OL_AVX2 void GemvBlockAvx2(const float* block, int64_t kc, const float* a, int64_t q0, int64_t q1,
                           bool first, float* y) {
  for (int64_t q = q0; q < q1; ++q) {
    float* out = y + (q - q0) * kNr;
    __m256 lo0 = first ? _mm256_setzero_ps() : _mm256_load_ps(out);
    __m256 hi0 = first ? _mm256_setzero_ps() : _mm256_load_ps(out + 8);
    __m256 lo1 = _mm256_setzero_ps(), hi1 = _mm256_setzero_ps();
    const float* panel = block + q * kNr * kc;
    int64_t p = 0;
    for (; p + 2 <= kc; p += 2) {
      const __m256 a0 = _mm256_broadcast_ss(a + p), a1 = _mm256_broadcast_ss(a + p + 1);
      const float* r = panel + p * kNr;
      lo0 = _mm256_fmadd_ps(a0, _mm256_load_ps(r), lo0);
      hi0 = _mm256_fmadd_ps(a0, _mm256_load_ps(r + 8), hi0);
      lo1 = _mm256_fmadd_ps(a1, _mm256_load_ps(r + 16), lo1);
      hi1 = _mm256_fmadd_ps(a1, _mm256_load_ps(r + 24), hi1);
    }
    if (p < kc) {
      const __m256 a0 = _mm256_broadcast_ss(a + p);
      lo0 = _mm256_fmadd_ps(a0, _mm256_load_ps(panel + p * kNr), lo0);
      hi0 = _mm256_fmadd_ps(a0, _mm256_load_ps(panel + p * kNr + 8), hi0);
    }
    _mm256_store_ps(out, _mm256_add_ps(lo0, lo1));
    _mm256_store_ps(out + 8, _mm256_add_ps(hi0, hi1));
  }
}

OL_AVX512 void GemvBlockAvx512(const float* block, int64_t kc, const float* a, int64_t q0,
                               int64_t q1, bool first, float* y) {
  for (int64_t q = q0; q < q1; ++q) {
    float* out = y + (q - q0) * kNr;
    __m512 acc0 = first ? _mm512_setzero_ps() : _mm512_load_ps(out);
    __m512 acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    const float* panel = block + q * kNr * kc;
    int64_t p = 0;
    for (; p + 4 <= kc; p += 4) {
      const float* r = panel + p * kNr;
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[p]), _mm512_load_ps(r), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_set1_ps(a[p + 1]), _mm512_load_ps(r + kNr), acc1);
      acc2 = _mm512_fmadd_ps(_mm512_set1_ps(a[p + 2]), _mm512_load_ps(r + 2 * kNr), acc2);
      acc3 = _mm512_fmadd_ps(_mm512_set1_ps(a[p + 3]), _mm512_load_ps(r + 3 * kNr), acc3);
    }
    for (; p < kc; ++p)
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[p]), _mm512_load_ps(panel + p * kNr), acc0);
    _mm512_store_ps(out, _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  }
}
#endif

using GemvBlockFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, bool, float*);

GemvBlockFn SelectGemvBlock(GemmPath path) {
#ifdef OL_HAVE_X86
  if (path != GemmPath::kPortable && path != GemmPath::kAvx2 && CpuHasAvx512())
    return GemvBlockAvx512;
  if (UseAvx2(path)) return GemvBlockAvx2;
#endif
  (void)path;
  return GemvBlockPortable;
}

void GemvPacked(const GemmArgs& g, const PackedB& b, GemmPath path) {
  const int64_t depth = DepthBlock(g.k);
  // A as K contiguous floats (a column of a transposed A is gathered once: K is small).
  std::vector<float> a_dense;
  const float* a = g.a;
  if (g.trans_a && g.lda != 1) {
    a_dense.resize(static_cast<size_t>(g.k));
    for (int64_t p = 0; p < g.k; ++p) a_dense[static_cast<size_t>(p)] = g.a[p * g.lda];
    a = a_dense.data();
  }
  const GemvBlockFn kernel = SelectGemvBlock(path);
  constexpr int64_t kMaxRun = 32;  // panels per task at most: partial sums stay in L1
  const int64_t panels = (g.n + kNr - 1) / kNr;
  // At least two runs per thread (balance), each as long as that allows (long streams).
  const int64_t want = 2 * Workers();
  const int64_t run = std::clamp<int64_t>((panels + want - 1) / want, 1, kMaxRun);
  const int64_t runs = (panels + run - 1) / run;
  Split(runs, 1, [&](int64_t r0, int64_t r1) {
    alignas(64) float y[kMaxRun * kNr];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t q0 = r * run, q1 = std::min(panels, q0 + run);
      for (int64_t p0 = 0; p0 < g.k; p0 += depth)
        kernel(b.block(p0), std::min(depth, g.k - p0), a + p0, q0, q1, p0 == 0, y);
      const int64_t j0 = q0 * kNr, w = std::min(g.n, q1 * kNr) - j0;
      float* c = g.c + j0;
      for (int64_t j = 0; j < w; ++j)
        c[j] = g.alpha * y[j] + (g.beta == 0.0f ? 0.0f : g.beta * c[j]);
    }
  });
}

}  // namespace

PackedB::PackedB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb)
    : trans_b_(trans_b), k_(k), n_(n), padded_n_(PaddedN(n)) {
  OL_CHECK(
      k > 0 && n > 0, core::ErrorCode::kInvalidArgument,
      "PackedB needs a non-empty B, got K = " + std::to_string(k) + ", N = " + std::to_string(n));
  storage_ = AllocateWeightStorage(static_cast<size_t>(k * padded_n_) * sizeof(float));
  data_ = static_cast<float*>(storage_.get());
  GemmArgs g;
  g.trans_b = trans_b;
  g.k = k;
  g.n = n;
  g.b = b;
  g.ldb = ldb;
  const int64_t depth = DepthBlock(k);
  for (int64_t p0 = 0; p0 < k; p0 += depth)
    PackBBlock(g, nullptr, p0, std::min(depth, k - p0), data_ + p0 * padded_n_);
  b_packs.fetch_add(1, std::memory_order_relaxed);
}

size_t PackedB::bytes() const { return static_cast<size_t>(k_ * padded_n_) * sizeof(float); }

uint64_t BPacksForTesting() { return b_packs.load(std::memory_order_relaxed); }

void Sgemm(const GemmArgs& g, GemmPath path) { Sgemm(g, nullptr, path); }

void SgemmOnThisThread(const GemmArgs& g, GemmPath path) {
  struct Serial {
    bool was = serial_here;
    Serial() { serial_here = true; }
    ~Serial() { serial_here = was; }
  } serial;
  Sgemm(g, nullptr, path);
}

void Sgemm(const GemmArgs& g, const PackedB* packed, GemmPath path) {
  if (packed != nullptr)
    OL_CHECK(packed->trans_b() == g.trans_b && packed->k() == g.k && packed->n() == g.n,
             core::ErrorCode::kInvalidArgument,
             "Sgemm: the packed B holds a " + std::to_string(packed->k()) + " x " +
                 std::to_string(packed->n()) + " operand, the call needs " + std::to_string(g.k) +
                 " x " + std::to_string(g.n));
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) {  // empty sum: C = beta * C
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        float& c = g.c[i * g.ldc + j];
        c = g.beta == 0.0f ? 0.0f : g.beta * c;
      }
    return;
  }
  const bool avx2 = UseAvx2(path);
  if (g.m == 1) return packed != nullptr ? GemvPacked(g, *packed, path) : Gemv(g, avx2);
  PackedGemm(g, packed, nullptr, SelectKernels(path));
}

void SgemmFromPanels(const GemmArgs& g, const BPanelSource& source, GemmPath path) {
  static_assert(kNr == kPanelColumns);
  if (g.m <= 0 || g.n <= 0) return;
  OL_CHECK(g.k > 0, core::ErrorCode::kInvalidArgument, "SgemmFromPanels needs K > 0");
  PackedGemm(g, nullptr, &source, SelectKernels(path));
}

}  // namespace onnx_light::ops::math
