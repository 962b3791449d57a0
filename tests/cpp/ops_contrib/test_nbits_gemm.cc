// The block-quantized GEMV/GEMM of MatMulNBits (ops/contrib/nbits_gemm.h) against a plain
// scalar reference in double over the same quantized values: both the AVX2 and the portable
// paths, 4 and 8 bits, every supported block size, odd N (a partial last column tile) and K
// that is not a multiple of the block (zero padded rows).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ops/contrib/nbits_gemm.h"
#include "ops/math/cpu_features.h"
#include "ops/math/gemm.h"

namespace contrib = onnx_light::ops::contrib;
namespace math = onnx_light::ops::math;

namespace {

// Random MatMulNBits operands in onnxruntime's layout, and W[k][n] in double.
struct Quantized {
  int bits;
  int64_t n, k, block, k_blocks;
  std::vector<uint8_t> b, zp;
  std::vector<float> scales;
  std::vector<double> w;  // [k * n]

  Quantized(int bits_, int64_t n_, int64_t k_, int64_t block_, bool with_zp, uint32_t seed)
      : bits(bits_), n(n_), k(k_), block(block_), k_blocks((k_ + block_ - 1) / block_) {
    std::mt19937 rng(seed);
    const int levels = 1 << bits;
    const int64_t blob = block * bits / 8;
    b.assign(static_cast<size_t>(n * k_blocks * blob), 0);
    scales.resize(static_cast<size_t>(n * k_blocks));
    w.assign(static_cast<size_t>(k * n), 0.0);
    const int64_t zp_cols = bits == 8 ? k_blocks : (k_blocks + 1) / 2;
    if (with_zp) zp.assign(static_cast<size_t>(n * zp_cols), 0);
    std::uniform_real_distribution<float> scale(0.01f, 0.1f);
    for (int64_t col = 0; col < n; ++col)
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const float s = scale(rng);
        scales[static_cast<size_t>(col * k_blocks + kb)] = s;
        int z = levels / 2;
        if (with_zp) {
          z = static_cast<int>(rng() % static_cast<uint32_t>(levels));
          uint8_t& byte = zp[static_cast<size_t>(col * zp_cols + (bits == 8 ? kb : kb / 2))];
          byte = static_cast<uint8_t>(bits == 8 ? z : byte | (z << ((kb & 1) * 4)));
        }
        for (int64_t i = 0; i < block; ++i) {
          const int q = static_cast<int>(rng() % static_cast<uint32_t>(levels));
          uint8_t* blob_bytes = b.data() + (col * k_blocks + kb) * blob;
          if (bits == 8)
            blob_bytes[i] = static_cast<uint8_t>(q);
          else
            blob_bytes[i / 2] = static_cast<uint8_t>(blob_bytes[i / 2] | (q << ((i & 1) * 4)));
          const int64_t row = kb * block + i;
          if (row < k) w[static_cast<size_t>(row * n + col)] = static_cast<double>(q - z) * s;
        }
      }
  }

  contrib::NBitsSource Source() const {
    contrib::NBitsSource s;
    s.bits = bits;
    s.n = n;
    s.k = k;
    s.block = block;
    s.b = b.data();
    s.scales = scales.data();
    s.zp_packed = zp.empty() ? nullptr : zp.data();
    return s;
  }
};

std::vector<float> Activations(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> a(static_cast<size_t>(count));
  for (float& x : a) x = normal(rng);
  return a;
}

// |y - reference| <= 2e-6 * sum_k |a_k w_kn| + 1e-6 for every element of row r.
void CheckRow(const Quantized& q, const float* a, const float* y) {
  for (int64_t col = 0; col < q.n; ++col) {
    double ref = 0, magnitude = 0;
    for (int64_t row = 0; row < q.k; ++row) {
      const double t = a[row] * q.w[static_cast<size_t>(row * q.n + col)];
      ref += t;
      magnitude += std::abs(t);
    }
    CHECK(std::abs(y[col] - ref) <= 2e-6 * magnitude + 1e-6);
  }
}

constexpr contrib::NBitsPath kPaths[] = {contrib::NBitsPath::kPortable, contrib::NBitsPath::kAvx2,
                                         contrib::NBitsPath::kAvx512};

}  // namespace

TEST_CASE("the int4 and int8 GEMV equal the scalar reference on both paths, odd N and K") {
  uint32_t seed = 1;
  for (int bits : {4, 8})
    for (int64_t block : {16, 32, 64, 128, 256})
      for (bool with_zp : {false, true})
        for (auto nk : {std::pair<int64_t, int64_t>{37, 3 * block - 5},
                        {16, block},
                        {1, 2 * block + 1},
                        {53, 7}})
          for (auto path : kPaths) {
            // Not a structured binding: clang 14 cannot capture one (CAPTURE is a lambda).
            const int64_t n = nk.first, k = nk.second;
            CAPTURE(bits);
            CAPTURE(block);
            CAPTURE(with_zp);
            CAPTURE(n);
            CAPTURE(k);
            const Quantized q(bits, n, k, block, with_zp, ++seed);
            const contrib::PackedNBits packed(q.Source());
            const auto a = Activations(k, seed);
            std::vector<float> y(static_cast<size_t>(n), -1.0f);
            contrib::NBitsGemv(packed, a.data(), y.data(), path);
            CheckRow(q, a.data(), y.data());
          }
}

TEST_CASE("both paths equal the reference on a real decoder shape (K = 576, N = 1536)") {
  const Quantized q(4, 1536, 576, 32, true, 99);
  const contrib::PackedNBits packed(q.Source());
  const auto a = Activations(q.k, 5);
  std::vector<float> avx(1536), portable(1536);
  contrib::NBitsGemv(packed, a.data(), avx.data(), contrib::NBitsPath::kAvx2);
  contrib::NBitsGemv(packed, a.data(), portable.data(), contrib::NBitsPath::kPortable);
  CheckRow(q, a.data(), avx.data());
  CheckRow(q, a.data(), portable.data());
  MESSAGE("AVX2/FMA on this CPU: " << onnx_light::ops::math::CpuHasAvx2Fma());
}

// 19: one block of rows (A packed once, each task dequantizes its own panels); 150: more rows
// than one SGEMM row block (kMc = 144), so a depth block of B is dequantized once and shared.
TEST_CASE("the M > 1 product (GEMV rows, then dequantized tiles into SGEMM) equals the reference") {
  for (int64_t m : {2, 5, 19, 150})
    for (auto nkb : {std::tuple<int64_t, int64_t, int64_t>{37, 91, 32},
                     {300, 600, 64},
                     {129, 17, 16},
                     {40, 2100, 128}}) {
      const int64_t n = std::get<0>(nkb), k = std::get<1>(nkb), block = std::get<2>(nkb);
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      const Quantized q(4, n, k, block, true, static_cast<uint32_t>(m * 7 + n));
      const contrib::PackedNBits packed(q.Source());
      const auto a = Activations(m * k, static_cast<uint32_t>(m));
      for (auto path : kPaths) {
        std::vector<float> c(static_cast<size_t>(m * n), -1.0f);
        contrib::NBitsGemm(packed, m, a.data(), c.data(), path);
        for (int64_t r = 0; r < m; ++r) CheckRow(q, a.data() + r * k, c.data() + r * n);
      }
    }
}

TEST_CASE(
    "2-4 rows of float activations (one pass over the tiles) equal the GEMV of each row "
    "bit for bit") {
  for (int bits : {4, 8})
    for (bool zero_points : {true, false})
      for (int64_t m : {2, 3, 4})
        for (auto nkb :
             {std::tuple<int64_t, int64_t, int64_t>{37, 91, 32}, {300, 576, 64}, {129, 17, 16}}) {
          const int64_t n = std::get<0>(nkb), k = std::get<1>(nkb), block = std::get<2>(nkb);
          CAPTURE(bits);
          CAPTURE(zero_points);
          CAPTURE(m);
          CAPTURE(n);
          const Quantized q(bits, n, k, block, zero_points, static_cast<uint32_t>(m + n + bits));
          const contrib::PackedNBits packed(q.Source());
          const auto a = Activations(m * k, static_cast<uint32_t>(m + 3));
          std::vector<float> c(static_cast<size_t>(m * n), -1.0f), row(static_cast<size_t>(n));
          contrib::NBitsGemm(packed, m, a.data(), c.data());
          for (int64_t r = 0; r < m; ++r) {
            contrib::NBitsGemv(packed, a.data() + r * k, row.data());
            // (The AVX-512 GEMV, 16 columns a register, equals the AVX2 one bit for bit.)
            std::vector<float> avx2(static_cast<size_t>(n));
            contrib::NBitsGemv(packed, a.data() + r * k, avx2.data(), contrib::NBitsPath::kAvx2);
            for (int64_t col = 0; col < n; ++col) {
              REQUIRE(c[static_cast<size_t>(r * n + col)] == row[static_cast<size_t>(col)]);
              REQUIRE(avx2[static_cast<size_t>(col)] == row[static_cast<size_t>(col)]);
            }
            CheckRow(q, a.data() + r * k, c.data() + r * n);
          }
        }
}

TEST_CASE(
    "the packed copy holds the 4-bit weights, one scale and one scaled zero point per block") {
  // Without zero points (all 8) no per-block zero point is kept.
  const Quantized symmetric(4, 40, 100, 32, false, 4);
  CHECK(contrib::PackedNBits(symmetric.Source()).bytes() ==
        static_cast<size_t>(3 * 4 * (16 * 32 / 2) + 4 * 3 * 4 * 16));
  const Quantized q(4, 40, 100, 32, true, 3);
  const contrib::PackedNBits packed(q.Source());
  // 3 column tiles of 16 (the last padded), 4 blocks of 32 rows.
  CHECK(packed.tiles() == 3);
  CHECK(packed.bytes() == static_cast<size_t>(3 * 4 * (16 * 32 / 2) + 2 * 4 * 3 * 4 * 16));
  for (int64_t row : {0, 31, 32, 99})
    for (int64_t col : {0, 15, 16, 39})
      CHECK(contrib::NBitsWeight(packed, row, col) ==
            doctest::Approx(q.w[static_cast<size_t>(row * q.n + col)]).epsilon(1e-6));
}

TEST_CASE("the int8-activation GEMV (accuracy_level 4) is the exact product of the int8 row") {
  uint32_t seed = 500;
  for (int64_t block : {32, 64, 128, 256})
    for (bool with_zp : {false, true})
      for (auto nk : {std::pair<int64_t, int64_t>{37, 3 * block - 5}, {16, block}, {49, 33}}) {
        const int64_t n = nk.first, k = nk.second;
        CAPTURE(block);
        CAPTURE(with_zp);
        CAPTURE(n);
        CAPTURE(k);
        const Quantized q(4, n, k, block, with_zp, ++seed);
        const contrib::PackedNBits packed(q.Source());
        REQUIRE(contrib::Int8Eligible(packed));
        const auto a = Activations(k, seed);
        // The reference multiplies the dequantized int8 row by W in double.
        const int64_t k_pad = packed.k_blocks() * block;
        std::vector<int8_t> qa(static_cast<size_t>(k_pad));
        std::vector<float> scales(static_cast<size_t>(k_pad / 32));
        contrib::QuantizeActivations(a.data(), k, k_pad, qa.data(), scales.data());
        std::vector<float> a8(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i)
          a8[static_cast<size_t>(i)] =
              static_cast<float>(qa[static_cast<size_t>(i)]) * scales[static_cast<size_t>(i / 32)];
        std::vector<float> avx(static_cast<size_t>(n)), portable(static_cast<size_t>(n));
        contrib::NBitsGemv(packed, a.data(), avx.data(), contrib::NBitsPath::kAvx2,
                           contrib::NBitsCompute::kInt8);
        contrib::NBitsGemv(packed, a.data(), portable.data(), contrib::NBitsPath::kPortable,
                           contrib::NBitsCompute::kInt8);
        CheckRow(q, a8.data(), avx.data());
        for (int64_t j = 0; j < n; ++j)
          CHECK(avx[static_cast<size_t>(j)] == portable[static_cast<size_t>(j)]);
        if (math::CpuHasAvx512VnniVbmi()) {  // the VNNI path: the same sums, bit for bit
          std::vector<float> vnni(static_cast<size_t>(n), -1.0f);
          contrib::NBitsGemv(packed, a.data(), vnni.data(), contrib::NBitsPath::kAvx512,
                             contrib::NBitsCompute::kInt8);
          for (int64_t j = 0; j < n; ++j)
            REQUIRE(vnni[static_cast<size_t>(j)] == portable[static_cast<size_t>(j)]);
        }
      }
  if (!math::CpuHasAvx512VnniVbmi()) MESSAGE("no AVX-512 VNNI + VBMI here: that path not run");
}

TEST_CASE("the int8 prompt product (AVX-512 VNNI) equals the int8 GEMV of every row bit for bit") {
  if (!math::CpuHasAvx512Vnni()) {
    // Without VNNI the product is the float path, covered above; say which path ran.
    MESSAGE("this CPU has no AVX-512 VNNI: NBitsGemmInt8 must decline");
    const Quantized q(4, 37, 64, 32, false, 7);
    const contrib::PackedNBits packed(q.Source());
    std::vector<float> a(64 * 5, 1.0f), c(37 * 5);
    CHECK_FALSE(contrib::NBitsGemmInt8(packed, 5, a.data(), c.data()));
    return;
  }
  uint32_t seed = 900;
  for (int64_t block : {32, 64, 128, 256})
    for (bool with_zp : {false, true})
      for (auto nk : {std::pair<int64_t, int64_t>{37, 3 * block - 5}, {16, block}, {300, 600}})
        for (int64_t m : {2, 3, 5, 7, 8, 9, 19, 150}) {  // up to 8: unpacked in registers
          const int64_t n = nk.first, k = nk.second;
          CAPTURE(block);
          CAPTURE(with_zp);
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(m);
          const Quantized q(4, n, k, block, with_zp, ++seed);
          const contrib::PackedNBits packed(q.Source());
          const auto a = Activations(m * k, seed);
          std::vector<float> c(static_cast<size_t>(m * n), -1.0f);
          contrib::NBitsGemm(packed, m, a.data(), c.data(), contrib::NBitsPath::kAuto,
                             contrib::NBitsCompute::kInt8);
          std::vector<float> row(static_cast<size_t>(n));
          for (int64_t r = 0; r < m; ++r) {
            contrib::NBitsGemv(packed, a.data() + r * k, row.data(), contrib::NBitsPath::kAvx2,
                               contrib::NBitsCompute::kInt8);
            for (int64_t j = 0; j < n; ++j)
              REQUIRE(c[static_cast<size_t>(r * n + j)] == row[static_cast<size_t>(j)]);
          }
        }
}

TEST_CASE("int8 activations round to nearest with one scale per 32 values, zero rows stay zero") {
  std::vector<float> a(64, 0.0f);
  a[0] = 1.27f;
  a[1] = -0.5f;
  a[2] = 0.005f;  // 0.5 of a step: rounds to even (0)
  std::vector<int8_t> q(64);
  std::vector<float> scales(2);
  contrib::QuantizeActivations(a.data(), 40, 64, q.data(), scales.data());
  CHECK(scales[0] == doctest::Approx(0.01f));
  CHECK(q[0] == 127);
  CHECK(q[1] == -50);
  CHECK(q[2] == 0);
  CHECK(scales[1] == 0.0f);
  for (int i = 32; i < 64; ++i) CHECK(q[static_cast<size_t>(i)] == 0);
}

// A NaN or infinite activation has no int8 code: casting it was undefined behaviour (UBSan,
// libFuzzer finding: tests/fuzz/regressions/model/matmulnbits-nan-activation). Its group gets
// codes 0 and a NaN scale, so the products of that group are NaN as in float; the other
// groups are unchanged.
TEST_CASE("int8 activations of a group with a NaN or an infinity get a NaN scale and codes 0") {
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> a(64, 0.0f);
    a[1] = bad;
    a[2] = 0.5f;
    a[33] = 1.27f;
    std::vector<int8_t> q(64, 1);
    std::vector<float> scales(2);
    contrib::QuantizeActivations(a.data(), 64, 64, q.data(), scales.data());
    CHECK(std::isnan(scales[0]));
    for (int i = 0; i < 32; ++i) CHECK(q[static_cast<size_t>(i)] == 0);
    CHECK(scales[1] == doctest::Approx(0.01f));
    CHECK(q[33] == 127);
  }
}

// The AVX-512 groups of QuantizeActivations equal the scalar code bit for bit: random rows of
// several magnitudes, exact half steps, a row that ends inside a group, groups with a NaN or
// an infinity, all-zero groups and subnormal ones (whose 1 / scale overflows: codes 0).
TEST_CASE("int8 activations: the vector path equals the scalar code bit for bit") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t k : {int64_t{32}, int64_t{576}, int64_t{1536}, int64_t{1000}}) {
    const int64_t k_pad = (k + 31) / 32 * 32 + 32;  // one group past the row: codes 0
    std::vector<float> a(static_cast<size_t>(k_pad), 0.0f);
    for (int64_t i = 0; i < k; ++i)
      a[static_cast<size_t>(i)] = normal(rng) * std::pow(10.0f, static_cast<float>(i % 7) - 3.0f);
    if (k >= 576) {
      a[64] = 1.27f;  // group 2: its scale is 0.01, so 0.005 is exactly half a step
      for (int i = 65; i < 96; ++i) a[static_cast<size_t>(i)] = 0.005f * static_cast<float>(i % 5);
      a[100] = std::nanf("");
      a[170] = -INFINITY;
      for (int i = 192; i < 224; ++i) a[static_cast<size_t>(i)] = 0.0f;
      for (int i = 224; i < 256; ++i)
        a[static_cast<size_t>(i)] = 1e-44f * static_cast<float>(i % 3);
    }
    std::vector<int8_t> q(static_cast<size_t>(k_pad)), q_ref(q.size());
    std::vector<float> scales(static_cast<size_t>(k_pad / 32)), scales_ref(scales.size());
    contrib::QuantizeActivations(a.data(), k, k_pad, q.data(), scales.data());
    contrib::QuantizeActivationsPortable(a.data(), k, k_pad, q_ref.data(), scales_ref.data());
    CHECK(q == q_ref);
    for (size_t g = 0; g < scales.size(); ++g) {
      INFO("k " << k << " group " << g);
      CHECK(std::memcmp(&scales[g], &scales_ref[g], sizeof(float)) == 0);
    }
  }
}
