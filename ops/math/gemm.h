// Single-precision GEMM for the MatMul and Gemm kernels.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N]   (row-major, leading dims)
// op(X) is X or X^T. beta == 0 means C is not read (it may hold garbage or NaN).
// The large-matrix path packs A and B into cache-sized panels and runs a register-blocked
// micro-kernel: AVX2/FMA when the CPU has it (chosen at run time), else a portable one
// the compiler auto-vectorises. M == 1 (decode-shaped GEMV) streams B once, split over N.
// Work is split with tbb::parallel_for in the caller's current task_arena.
#pragma once

#include <cstdint>

namespace onnx_light::ops::math {

enum class GemmPath { kAuto, kPortable, kAvx2 };

struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
};

// True when this CPU runs the AVX2/FMA path.
bool CpuHasAvx2Fma();

// `path` forces an implementation (tests run both); kAvx2 falls back to kPortable when the
// CPU lacks AVX2/FMA.
void Sgemm(const GemmArgs& args, GemmPath path = GemmPath::kAuto);

// Convenience for contiguous row-major operands.
inline void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c,
                  GemmPath path = GemmPath::kAuto) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.lda = trans_a ? m : k;
  g.b = b;
  g.ldb = trans_b ? k : n;
  g.beta = beta;
  g.c = c;
  g.ldc = n;
  Sgemm(g, path);
}

}  // namespace onnx_light::ops::math
