#include <tbb/task_arena.h>

#include <cmath>

#include "core/error.h"
#include "op_test_util.h"
#include "ops/math/gemm.h"

using namespace ops_math_test;
using onnx_light::core::Error;
namespace math = onnx_light::ops::math;

namespace {

// Every implementation (each falls back to the next simpler one on a CPU without it).
constexpr math::GemmPath kAllPaths[] = {math::GemmPath::kPortable, math::GemmPath::kAvx2,
                                        math::GemmPath::kAvx512};

std::vector<double> RefGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                            const std::vector<float>& a, const std::vector<float>& b, float beta,
                            const std::vector<float>& c) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
             (tb ? b[j * k + p] : b[p * n + j]);
      y[i * n + j] = alpha * s + (beta != 0 ? beta * static_cast<double>(c[i * n + j]) : 0.0);
    }
  return y;
}

// C[M, N] (leading dimension ldc) = alpha * A[M, K] * B[K, N] + beta * C, A and B dense.
math::GemmArgs DenseArgs(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         const float* b, float beta, float* c, int64_t ldc) {
  math::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.lda = k;
  g.b = b;
  g.ldb = n;
  g.beta = beta;
  g.c = c;
  g.ldc = ldc;
  return g;
}

}  // namespace

TEST_CASE("SGEMM: the AVX-512, AVX2 and portable paths all match a naive reference") {
  // Sizes cross the register tiles (6x16, 12x16) and the cache blocks (96 rows, 256 columns
  // and 256 deep), so partial tiles, several tasks and accumulation over depth blocks all run.
  const std::vector<int64_t> sizes = {1, 3, 17, 67, 129};
  for (math::GemmPath path : kAllPaths)
    for (int64_t m : sizes)
      for (int64_t n : {1, 3, 17, 67, 129, 300})
        for (int64_t k : {1, 17, 129, 300})
          for (int t = 0; t < 4; ++t) {
            const bool ta = t & 1, tb = t & 2;
            CAPTURE(static_cast<int>(path));
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(t);
            const std::vector<float> a = Random(m * k, -1, 1, 1), b = Random(k * n, -1, 1, 2);
            std::vector<float> c = Random(m * n, -1, 1, 3);
            const float alpha = 0.5f, beta = t == 3 ? 0.0f : 2.0f;
            const std::vector<double> expected = RefGemm(ta, tb, m, n, k, alpha, a, b, beta, c);
            if (beta == 0) std::fill(c.begin(), c.end(), std::nanf(""));  // must not be read
            math::Sgemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data(), path);
            CheckClose(c, expected, 1e-5, 1e-5);
          }
}

TEST_CASE("SGEMM honours leading dimensions larger than the matrix") {
  for (math::GemmPath path : kAllPaths) {
    const int64_t m = 19, n = 21, k = 23, lda = 30, ldb = 40, ldc = 50;
    const std::vector<float> a = Random(m * lda, -1, 1, 4), b = Random(k * ldb, -1, 1, 5);
    std::vector<float> c(static_cast<size_t>(m * ldc), 7.0f);
    math::GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a.data();
    g.lda = lda;
    g.b = b.data();
    g.ldb = ldb;
    g.c = c.data();
    g.ldc = ldc;
    math::Sgemm(g, path);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j < n) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) s += static_cast<double>(a[i * lda + p]) * b[p * ldb + j];
          CHECK(c[i * ldc + j] == doctest::Approx(s).epsilon(1e-5));
        } else {
          CHECK(c[i * ldc + j] == 7.0f);  // outside the matrix: untouched
        }
      }
  }
}

TEST_CASE("prompt-shaped SGEMM: fused tile stores, equal column blocks, whole-depth tasks") {
  // One row block (M <= 144) packs A for every depth block and runs each column block
  // through the whole depth; more rows do the same per row block with a packed B (M = 300
  // on one thread: one column block wider than 256, so column panels outer) and take the
  // per-depth-block loop without one. Two-panel (32-column) AVX-512 tiles run wherever two
  // panels remain; a large A (128 x 2100) is packed in parallel. K = 600 is three depth
  // blocks of 200, N = 1153 ends in a one-column panel (masked or buffered stores), N = 1152
  // splits into column blocks that do not divide into 256. C has a larger leading dimension
  // whose padding must stay untouched, with alpha and beta applied on the first depth block
  // only, and beta = 0 never reading C (NaN).
  struct Case {
    int64_t m, n, k;
  };
  for (const Case s :
       {Case{128, 1153, 600}, Case{12, 1152, 600}, Case{150, 67, 600}, Case{300, 1153, 600},
        Case{128, 40, 2100}, Case{128, 40, 5}, Case{7, 16, 300}})
    for (const float beta : {0.0f, 2.0f}) {
      const int64_t ldc = s.n + 3;
      const std::vector<float> a = Random(s.m * s.k, -1, 1, 11), b = Random(s.k * s.n, -1, 1, 12);
      const std::vector<float> c0 = Random(s.m * ldc, -1, 1, 13);
      const float alpha = 0.5f;
      std::vector<double> expected(static_cast<size_t>(s.m * ldc));
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          if (j >= s.n) {
            expected[at] = c0[at];  // padding: untouched
            continue;
          }
          double sum = 0;
          for (int64_t p = 0; p < s.k; ++p)
            sum += static_cast<double>(a[i * s.k + p]) * b[p * s.n + j];
          expected[at] = alpha * sum + (beta != 0 ? beta * static_cast<double>(c0[at]) : 0.0);
        }
      const math::PackedB packed(false, s.k, s.n, b.data(), s.n);
      for (int threads : {1, 2, 3}) {
        tbb::task_arena arena(threads, static_cast<unsigned>(threads));
        for (math::GemmPath path : kAllPaths)
          for (bool use_packed : {false, true}) {
            CAPTURE(s.m);
            CAPTURE(s.n);
            CAPTURE(s.k);
            CAPTURE(beta);
            CAPTURE(threads);
            CAPTURE(static_cast<int>(path));
            CAPTURE(use_packed);
            std::vector<float> c = c0;
            if (beta == 0)
              for (int64_t i = 0; i < s.m; ++i)
                std::fill(c.begin() + i * ldc, c.begin() + i * ldc + s.n, std::nanf(""));
            const math::GemmArgs g =
                DenseArgs(s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c.data(), ldc);
            arena.execute([&] { math::Sgemm(g, use_packed ? &packed : nullptr, path); });
            CheckClose(c, expected, 1e-5, 1e-5);
          }
      }
    }
}

TEST_CASE("batched decode rows (M = 2..16) times a packed weight match the reference") {
  // Issue 15's decode step: one row per request against a constant weight (PackedB), and the
  // same rows packing B per call. Row counts 2..16 cross the 6- and 12-row tiles; N = 1153
  // ends in a one-column panel after an odd number of panels (the one-panel kernel follows
  // the two-panel ones, each prefetching the panels after its own), N = 80 is five panels;
  // K = 600 is three depth blocks (C read back), K = 40 one.
  struct Case {
    int64_t n, k;
  };
  for (const Case s : {Case{1153, 600}, Case{80, 40}}) {
    const std::vector<float> b = Random(s.k * s.n, -1, 1, 21);
    const math::PackedB packed(false, s.k, s.n, b.data(), s.n);
    for (int64_t m = 2; m <= 16; ++m) {
      const int64_t ldc = s.n + 5;
      const std::vector<float> a = Random(m * s.k, -1, 1, 22);
      const std::vector<float> c0 = Random(m * ldc, -1, 1, 23);
      const float alpha = 1.0f, beta = m % 2 == 0 ? 0.0f : 0.5f;
      std::vector<double> expected(static_cast<size_t>(m * ldc));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          double sum = 0;
          for (int64_t p = 0; p < s.k && j < s.n; ++p)
            sum += static_cast<double>(a[i * s.k + p]) * b[p * s.n + j];
          expected[at] = j >= s.n ? c0[at] : alpha * sum + beta * static_cast<double>(c0[at]);
        }
      for (int threads : {1, 2}) {
        tbb::task_arena arena(threads, static_cast<unsigned>(threads));
        for (math::GemmPath path : kAllPaths)
          for (bool use_packed : {false, true}) {
            CAPTURE(s.n);
            CAPTURE(s.k);
            CAPTURE(m);
            CAPTURE(threads);
            CAPTURE(static_cast<int>(path));
            CAPTURE(use_packed);
            std::vector<float> c = c0;
            if (beta == 0)
              for (int64_t i = 0; i < m; ++i)
                std::fill(c.begin() + i * ldc, c.begin() + i * ldc + s.n, std::nanf(""));
            const math::GemmArgs g =
                DenseArgs(m, s.n, s.k, alpha, a.data(), b.data(), beta, c.data(), ldc);
            arena.execute([&] { math::Sgemm(g, use_packed ? &packed : nullptr, path); });
            CheckClose(c, expected, 1e-5, 1e-5);
          }
      }
    }
  }
}

TEST_CASE("decode-shaped GEMV (M = 1) matches the reference on every path") {
  for (math::GemmPath path : kAllPaths)
    for (int64_t n : {1, 7, 67, 1000, 4099})
      for (int64_t k : {1, 33, 515}) {
        const std::vector<float> a = Random(k, -1, 1, 6), b = Random(k * n, -1, 1, 7);
        for (bool tb : {false, true}) {
          std::vector<float> c(static_cast<size_t>(n));
          math::Sgemm(false, tb, 1, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data(), path);
          CheckClose(c, RefGemm(false, tb, 1, n, k, 1.0f, a, b, 0.0f, c), 1e-5, 1e-5);
        }
      }
}

TEST_CASE("Gemm op: transA, transB, alpha, beta and broadcasting of C") {
  const int64_t m = 17, n = 5, k = 67;
  const std::vector<float> a = Random(m * k, -1, 1, 1), b = Random(k * n, -1, 1, 2);
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
    // C as [n] (row broadcast), [m, 1] (column), [] (scalar) and [m, n].
    const std::vector<float> crow = Random(n, -1, 1, 3), ccol = Random(m, -1, 1, 4);
    std::vector<float> c_full(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c_full[i * n + j] = crow[j];
    const Tensor y = Op("Gemm", 13)
                         .Int("transA", ta)
                         .Int("transB", tb)
                         .Float("alpha", 0.25f)
                         .Float("beta", -1.5f)
                         .Run1({F32(as, a), F32(bs, b), F32({n}, crow)});
    CHECK(y.shape() == Shape{m, n});
    CheckClose(y.ToFloatVector(), RefGemm(ta, tb, m, n, k, 0.25f, a, b, -1.5f, c_full), 1e-5, 1e-5);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c_full[i * n + j] = ccol[i];
    const Tensor y2 = Op("Gemm", 13)
                          .Int("transA", ta)
                          .Int("transB", tb)
                          .Run1({F32(as, a), F32(bs, b), F32({m, 1}, ccol)});
    CheckClose(y2.ToFloatVector(), RefGemm(ta, tb, m, n, k, 1, a, b, 1, c_full), 1e-5, 1e-5);
  }
  const Tensor y3 = Op("Gemm", 13).Run1({F32({1, 2}, {1, 2}), F32({2, 1}, {3, 4}), F32({}, {10})});
  CHECK(y3.ToFloatVector() == std::vector<float>{21});
  const Tensor y4 = Op("Gemm", 13).Run1({F32({1, 2}, {1, 2}), F32({2, 1}, {3, 4}), std::nullopt});
  CHECK(y4.ToFloatVector() == std::vector<float>{11});
  const Tensor h = Op("Gemm", 13)
                       .Run1({Half(DataType::kFloat16, {1, 2}, {1, 2}),
                              Half(DataType::kFloat16, {2, 1}, {3, 4})});
  CHECK(h.dtype() == DataType::kFloat16);
  CHECK(h.ToFloatVector() == std::vector<float>{11});
  const Tensor d =
      Op("Gemm", 13)
          .Int("transB", 1)
          .Float("alpha", 2)
          .Run1({Tensor::FromDouble("a", {1, 2}, {1, 2}), Tensor::FromDouble("b", {1, 2}, {3, 4}),
                 Tensor::FromDouble("c", {1}, {0.5})});
  CHECK(d.data<double>()[0] == 22.5);
}

TEST_CASE("Gemm errors name the node") {
  CHECK_THROWS_WITH_AS(Op("Gemm", 13).Run1({RandF32({2, 3}), RandF32({2, 3})}),
                       "Gemm node 'n_Gemm': inner dimensions differ: A has shape [2, 3] and B has "
                       "shape [2, 3]",
                       Error);
  CHECK_THROWS_WITH_AS(Op("Gemm", 13).Run1({RandF32({2, 3}), RandF32({3, 4}), RandF32({3, 4})}),
                       "Gemm node 'n_Gemm': C of shape [3, 4] does not broadcast to [2, 4]", Error);
  CHECK_THROWS_WITH_AS(Op("Gemm", 13).Run1({RandF32({2, 3, 1}), RandF32({3, 4})}),
                       doctest::Contains("A and B must be 2-D"), Error);
}
