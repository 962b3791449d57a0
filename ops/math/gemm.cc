#include "ops/math/gemm.h"

#include <algorithm>
#include <vector>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

bool CpuHasAvx2Fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

namespace {

inline float At(const float* x, int64_t ld, bool trans, int64_t r, int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

}  // namespace

void Sgemm(const GemmArgs& g, GemmPath path) {
  (void)path;
  if (g.m <= 0 || g.n <= 0) return;
  ParallelFor(g.m, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(g.n));
    for (int64_t i = r0; i < r1; ++i) {
      std::fill(row.begin(), row.end(), 0.0f);
      for (int64_t p = 0; p < g.k; ++p) {
        const float av = At(g.a, g.lda, g.trans_a, i, p);
        if (g.trans_b) {
          for (int64_t j = 0; j < g.n; ++j) row[j] += av * g.b[j * g.ldb + p];
        } else {
          const float* brow = g.b + p * g.ldb;
          for (int64_t j = 0; j < g.n; ++j) row[j] += av * brow[j];
        }
      }
      float* crow = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j)
        crow[j] = g.alpha * row[j] + (g.beta == 0.0f ? 0.0f : g.beta * crow[j]);
    }
  });
}

}  // namespace onnx_light::ops::math
