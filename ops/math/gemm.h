// Single-precision GEMM for the MatMul and Gemm kernels.
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N]   (row-major, leading dims)
// op(X) is X or X^T. beta == 0 means C is not read (it may hold garbage or NaN).
// The M > 1 path packs A and B into cache-sized panels and runs a register-blocked
// micro-kernel that stores its tile straight into C: AVX-512 (12 x 32 and 12 x 16 tiles) or
// AVX2/FMA (6 x 16) when the CPU has it (chosen at run time), else a portable one the
// compiler auto-vectorises. Up to 144 rows (prompts), A is packed once and each task runs
// its columns through the whole depth (one fork/join per call). M == 1 (decode-shaped GEMV)
// streams B once, split over N. Work is split with the runtime's ParallelFor
// (executor/parallel.h) in the caller's task arena.
// A B that is used many times (a constant weight) can be packed once into a PackedB and
// handed to Sgemm, which then skips the per-call packing of B.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ops/math/cpu_features.h"  // the paths it picks from

namespace onnx_light::ops::math {

enum class GemmPath { kAuto, kPortable, kAvx2, kAvx512 };

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

// op(B)[K, N] in the panel layout of the packed path (zero padded to a multiple of 16
// columns): what Sgemm would otherwise rebuild on every call with M > 1. Immutable once
// built, so any number of concurrent Sgemm calls may read it. Holds a copy: about
// 4 * K * round_up(N, 16) bytes from the default allocator (counted in its live bytes),
// or for 1-32 MiB carved from huge-page slabs (ops/math/weight_slab.h), independent of
// the source, which it does not keep alive.
class PackedB {
 public:
  PackedB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb);
  PackedB(const PackedB&) = delete;
  PackedB& operator=(const PackedB&) = delete;

  bool trans_b() const { return trans_b_; }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  size_t bytes() const;
  // The panels of depth block [p0, p0 + block): internal to the packed path.
  const float* block(int64_t p0) const { return data_ + p0 * padded_n_; }

 private:
  bool trans_b_;
  int64_t k_, n_, padded_n_;
  std::shared_ptr<void> storage_;
  float* data_ = nullptr;  // storage_, 64-byte aligned
};

// `path` forces an implementation (tests run all): kAvx512 falls back to kAvx2 without
// AVX-512F, kAvx2 to kPortable without AVX2/FMA. kAuto is the best the CPU has. The M == 1
// path is AVX2 for both kAvx2 and kAvx512 (it is bound by memory, not arithmetic).
void Sgemm(const GemmArgs& args, GemmPath path = GemmPath::kAuto);
// The same product with B's panels taken from `packed`: M > 1 runs the packed micro-kernel,
// M == 1 a GEMV that streams the panels (one sequential read per task and depth block).
// `packed` must hold op(args.b): the same trans_b, K and N (checked: a mismatch throws
// kInvalidArgument) and the same values (the caller's duty; args.b is not read). A null
// `packed` is plain Sgemm.
void Sgemm(const GemmArgs& args, const PackedB* packed, GemmPath path = GemmPath::kAuto);

// The same product on the calling thread alone (no task is spawned): for callers that run
// many small products in parallel themselves (attention over heads and query blocks).
void SgemmOnThisThread(const GemmArgs& args, GemmPath path = GemmPath::kAuto);

// B produced on demand in the packed panel layout, for a B that is not stored as floats (a
// quantized weight, dequantized panel by panel straight into the layout the micro-kernel
// reads, instead of into a float matrix that Sgemm would pack again). source(p0, kc, j0, j1,
// out) writes op(B)[p0 : p0 + kc, j0 : j1), j0 a multiple of kPanelColumns, as
// kPanelColumns-wide panels: panel q (columns j0 + q * kPanelColumns ..) at
// out + q * kPanelColumns * kc, element (p, j) at p * kPanelColumns + j; the columns of the
// last panel past j1 may hold anything (they are computed, never stored). It is called from
// several threads at once, each with its own `out`. args.b and args.trans_b are not read.
constexpr int64_t kPanelColumns = 16;
using BPanelSource =
    std::function<void(int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out)>;
void SgemmFromPanels(const GemmArgs& args, const BPanelSource& source,
                     GemmPath path = GemmPath::kAuto);

// How many times B was packed (per call without a PackedB, plus PackedB constructions)
// since the process started: lets tests check that a cached pack is reused.
uint64_t BPacksForTesting();

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
