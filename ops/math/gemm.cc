#include "ops/math/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ops/math/common.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define OL_HAVE_X86 1
#define OL_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace onnx_light::ops::math {

bool CpuHasAvx2Fma() {
#ifdef OL_HAVE_X86
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

namespace {

// Register tile (rows x columns of C per micro-kernel call) and cache blocks.
constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;
constexpr int64_t kKc = 256;   // depth of one packed panel pair (A panel 6 KB, B panel 16 KB)
constexpr int64_t kMc = 96;    // rows of A per task (multiple of kMr)
constexpr int64_t kNc = 256;   // columns of B per task (multiple of kNr)

// tile[kMr * kNr] = sum_p ap[p, 0:kMr] (outer) bp[p, 0:kNr] over kc packed steps.
using MicroKernel = void (*)(int64_t kc, const float* ap, const float* bp, float* tile);

// GCC/Clang generic vectors: 4 floats, lowered to whatever SIMD the target has (SSE2 on
// any x86-64, NEON on ARM) or to scalars.
typedef float V4 __attribute__((vector_size(16)));

inline V4 LoadV4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void MicroKernelPortable(int64_t kc, const float* ap, const float* bp, float* tile) {
  // Two passes of 3 rows keep 12 vector accumulators (fits 16 SSE registers).
  for (int64_t half = 0; half < 2; ++half) {
    V4 acc[3][4] = {};
    const float* a = ap + half * 3;
    const float* b = bp;
    for (int64_t p = 0; p < kc; ++p) {
      const V4 b0 = LoadV4(b), b1 = LoadV4(b + 4), b2 = LoadV4(b + 8), b3 = LoadV4(b + 12);
      for (int i = 0; i < 3; ++i) {
        const V4 av = V4{} + a[i];
        acc[i][0] += av * b0;
        acc[i][1] += av * b1;
        acc[i][2] += av * b2;
        acc[i][3] += av * b3;
      }
      a += kMr;
      b += kNr;
    }
    std::memcpy(tile + half * 3 * kNr, acc, sizeof(acc));
  }
}

#ifdef OL_HAVE_X86
OL_AVX2 void MicroKernelAvx2(int64_t kc, const float* ap, const float* bp, float* tile) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
    __m256 a = _mm256_broadcast_ss(ap + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    ap += kMr;
    bp += kNr;
  }
  _mm256_storeu_ps(tile + 0 * kNr, c00);
  _mm256_storeu_ps(tile + 0 * kNr + 8, c01);
  _mm256_storeu_ps(tile + 1 * kNr, c10);
  _mm256_storeu_ps(tile + 1 * kNr + 8, c11);
  _mm256_storeu_ps(tile + 2 * kNr, c20);
  _mm256_storeu_ps(tile + 2 * kNr + 8, c21);
  _mm256_storeu_ps(tile + 3 * kNr, c30);
  _mm256_storeu_ps(tile + 3 * kNr + 8, c31);
  _mm256_storeu_ps(tile + 4 * kNr, c40);
  _mm256_storeu_ps(tile + 4 * kNr + 8, c41);
  _mm256_storeu_ps(tile + 5 * kNr, c50);
  _mm256_storeu_ps(tile + 5 * kNr + 8, c51);
}
#endif

bool UseAvx2(GemmPath path) {
  return path != GemmPath::kPortable && CpuHasAvx2Fma();
}

// A 32-byte aligned float buffer (the AVX2 kernel loads packed B aligned).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t n) : data_(new float[static_cast<size_t>(n) + 8]) {}
  float* get() {
    const auto p = reinterpret_cast<uintptr_t>(data_.get());
    return reinterpret_cast<float*>((p + 31) & ~uintptr_t{31});
  }

 private:
  std::unique_ptr<float[]> data_;
};

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] into kMr-row panels, zero padded: panel r holds
// rows i0 + r*kMr .. +kMr, element (p, i) at p * kMr + i.
void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* out) {
  for (int64_t r = 0; r < mc; r += kMr) {
    const int64_t mr = std::min(kMr, mc - r);
    float* panel = out + r * kc;
    for (int64_t p = 0; p < kc; ++p) {
      float* dst = panel + p * kMr;
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t row = i0 + r + i, col = p0 + p;
        dst[i] = g.trans_a ? g.a[col * g.lda + row] : g.a[row * g.lda + col];
      }
      for (int64_t i = mr; i < kMr; ++i) dst[i] = 0.0f;
    }
  }
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nr] (one kNr-column panel), zero padded.
void PackBPanel(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nr, float* out) {
  for (int64_t p = 0; p < kc; ++p) {
    float* dst = out + p * kNr;
    if (!g.trans_b) {
      const float* src = g.b + (p0 + p) * g.ldb + j0;
      std::memcpy(dst, src, static_cast<size_t>(nr) * sizeof(float));
    } else {
      for (int64_t j = 0; j < nr; ++j) dst[j] = g.b[(j0 + j) * g.ldb + p0 + p];
    }
    for (int64_t j = nr; j < kNr; ++j) dst[j] = 0.0f;
  }
}

// C tile update: C = alpha * tile + (first ? beta * C : C), only the valid mr x nr part.
inline void StoreTile(const float* tile, float* c, int64_t ldc, int64_t mr, int64_t nr,
                      float alpha, float beta, bool first) {
  for (int64_t i = 0; i < mr; ++i) {
    float* crow = c + i * ldc;
    const float* t = tile + i * kNr;
    if (!first) {
      for (int64_t j = 0; j < nr; ++j) crow[j] += alpha * t[j];
    } else if (beta == 0.0f) {
      for (int64_t j = 0; j < nr; ++j) crow[j] = alpha * t[j];
    } else {
      for (int64_t j = 0; j < nr; ++j) crow[j] = alpha * t[j] + beta * crow[j];
    }
  }
}

void PackedGemm(const GemmArgs& g, MicroKernel kernel) {
  const int64_t n_panels = (g.n + kNr - 1) / kNr;
  AlignedBuffer packed_b(n_panels * kNr * kKc);
  float* bp = packed_b.get();
  const int64_t m_blocks = (g.m + kMc - 1) / kMc;
  const int64_t n_blocks = (g.n + kNc - 1) / kNc;
  for (int64_t p0 = 0; p0 < g.k; p0 += kKc) {
    const int64_t kc = std::min(kKc, g.k - p0);
    const bool first = p0 == 0;
    // op(B)[p0 : p0+kc, :] packed once per depth block, shared by all tasks.
    ParallelFor(n_panels, 8, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q)
        PackBPanel(g, p0, kc, q * kNr, std::min(kNr, g.n - q * kNr), bp + q * kNr * kc);
    });
    ParallelFor(m_blocks * n_blocks, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> a_buffer;
      a_buffer.resize(static_cast<size_t>(kMc * kKc));
      alignas(32) float tile[kMr * kNr];
      int64_t packed_block = -1;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t mb = t / n_blocks, nb = t % n_blocks;
        const int64_t i0 = mb * kMc, mc = std::min(kMc, g.m - i0);
        if (packed_block != mb) {
          PackA(g, i0, mc, p0, kc, a_buffer.data());
          packed_block = mb;
        }
        const int64_t j_end = std::min(g.n, (nb + 1) * kNc);
        for (int64_t j0 = nb * kNc; j0 < j_end; j0 += kNr) {
          const int64_t nr = std::min(kNr, g.n - j0);
          const float* bpanel = bp + (j0 / kNr) * kNr * kc;
          for (int64_t r = 0; r < mc; r += kMr) {
            kernel(kc, a_buffer.data() + r * kc, bpanel, tile);
            StoreTile(tile, g.c + (i0 + r) * g.ldc + j0, g.ldc, std::min(kMr, mc - r), nr,
                      g.alpha, g.beta, first);
          }
        }
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

OL_AVX2 float DotAvx2(const float* a, int64_t a_stride, const float* b, int64_t k) {
  if (a_stride != 1) return DotPortable(a, a_stride, b, k);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(b + p + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 16), _mm256_loadu_ps(b + p + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 24), _mm256_loadu_ps(b + p + 24), s3);
  }
  for (; p + 8 <= k; p += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; p < k; ++p) r += a[p] * b[p];
  return r;
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
    ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
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
  ParallelFor(g.n, std::max<int64_t>(1, 65536 / std::max<int64_t>(g.k, 1)),
              [&](int64_t j0, int64_t j1) {
                for (int64_t j = j0; j < j1; ++j) {
#ifdef OL_HAVE_X86
                  const float d = avx2 ? DotAvx2(g.a, a_stride, g.b + j * g.ldb, g.k)
                                       : DotPortable(g.a, a_stride, g.b + j * g.ldb, g.k);
#else
                  const float d = DotPortable(g.a, a_stride, g.b + j * g.ldb, g.k);
#endif
                  finish(g.c + j, &d, 1);
                }
              });
}

}  // namespace

void Sgemm(const GemmArgs& g, GemmPath path) {
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
  if (g.m == 1) return Gemv(g, avx2);
#ifdef OL_HAVE_X86
  PackedGemm(g, avx2 ? &MicroKernelAvx2 : &MicroKernelPortable);
#else
  PackedGemm(g, &MicroKernelPortable);
#endif
}

}  // namespace onnx_light::ops::math
