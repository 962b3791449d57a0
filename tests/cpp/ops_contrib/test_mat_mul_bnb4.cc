// com.microsoft MatMulBnb4 (ops/contrib/mat_mul_bnb4.cc) against a naive dequantize-then-
// multiply of the same codes: the vector GEMV (rows of whole 32-code steps in whole blocks),
// the element GEMV (blocks that straddle rows, odd K), the panel GEMM of more rows, FP4 and
// NF4. tests/python/test_hub_variants.py checks the codebooks and results against
// onnxruntime.
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/cpp/ops_math/op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;

namespace {

// The codebook values, read back from the kernel through an identity A (code c at k = c).
std::vector<float> Codebook(int64_t quant_type) {
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>((2 * i) << 4 | (2 * i + 1));
  std::vector<float> eye(16 * 16, 0.0f);
  for (int i = 0; i < 16; ++i) eye[static_cast<size_t>(i * 17)] = 1.0f;
  const Tensor y =
      Op("MatMulBnb4", 1, "com.microsoft")
          .Int("K", 16)
          .Int("N", 1)
          .Int("block_size", 16)
          .Int("quant_type", quant_type)
          .Run1({F32({16, 16}, eye), Tensor::FromVector("b", DataType::kUint8, {8}, bytes),
                 F32({1}, {1.0f})});
  return y.ToFloatVector();
}

}  // namespace

TEST_CASE("MatMulBnb4 reads its codebooks in code order, the even index high") {
  const std::vector<float> nf4 = Codebook(1), fp4 = Codebook(0);
  CHECK(nf4.front() == -1.0f);
  CHECK(nf4[7] == 0.0f);
  CHECK(nf4.back() == 1.0f);
  for (int i = 1; i < 16; ++i) CHECK(nf4[static_cast<size_t>(i)] > nf4[static_cast<size_t>(i - 1)]);
  CHECK(fp4[3] == 1.0f);
  CHECK(fp4[11] == -1.0f);
  CHECK(fp4[2] == 2.0f / 3);
}

TEST_CASE("MatMulBnb4 equals dequantize-then-multiply on every path") {
  struct Case {
    int64_t m, k, n, block;
  };
  for (const Case c :
       {Case{1, 128, 20, 64}, Case{3, 64, 9, 32}, Case{4, 96, 5, 32}, Case{2, 30, 7, 16},
        Case{1, 33, 3, 64}, Case{7, 128, 40, 64}, Case{20, 64, 33, 32}})
    for (int64_t quant_type : {0, 1}) {
      CAPTURE(c.m);
      CAPTURE(c.k);
      CAPTURE(c.n);
      CAPTURE(c.block);
      CAPTURE(quant_type);
      const std::vector<float> table = Codebook(quant_type);
      std::mt19937 rng(static_cast<uint32_t>(c.m * 100 + c.k + c.n));
      std::vector<uint8_t> b(static_cast<size_t>((c.n * c.k + 1) / 2));
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      const std::vector<float> absmax = Random((c.n * c.k + c.block - 1) / c.block, 0.5f, 2.0f, 3);
      const std::vector<float> a = Random(c.m * c.k, -1.0f, 1.0f, 4);
      std::vector<double> expected(static_cast<size_t>(c.m * c.n), 0.0);
      for (int64_t r = 0; r < c.m; ++r)
        for (int64_t n = 0; n < c.n; ++n)
          for (int64_t k = 0; k < c.k; ++k) {
            const int64_t flat = n * c.k + k;
            const uint8_t byte = b[static_cast<size_t>(flat / 2)];
            const float w = table[(flat & 1) ? (byte & 15) : (byte >> 4)] *
                            absmax[static_cast<size_t>(flat / c.block)];
            expected[static_cast<size_t>(r * c.n + n)] +=
                double{a[static_cast<size_t>(r * c.k + k)]} * w;
          }
      const Tensor y =
          Op("MatMulBnb4", 1, "com.microsoft")
              .Int("K", c.k)
              .Int("N", c.n)
              .Int("block_size", c.block)
              .Int("quant_type", quant_type)
              .Run1({F32({1, c.m, c.k}, a),
                     Tensor::FromVector("b", DataType::kUint8, {static_cast<int64_t>(b.size())}, b),
                     F32({static_cast<int64_t>(absmax.size())}, absmax)});
      CHECK(y.shape() == Shape{1, c.m, c.n});
      CheckClose(y.ToFloatVector(), expected, 1e-5, 1e-5);
    }
}

TEST_CASE("MatMulBnb4 refuses a bad quant_type and mismatched inputs, naming them") {
  auto op = [](int64_t quant_type) {
    return Op("MatMulBnb4", 1, "com.microsoft")
        .Int("K", 16)
        .Int("N", 2)
        .Int("block_size", 16)
        .Int("quant_type", quant_type);
  };
  const Tensor a = F32({1, 16}, std::vector<float>(16, 1.0f));
  const Tensor b = Tensor::FromVector("b", DataType::kUint8, {16}, std::vector<uint8_t>(16, 0x12));
  CHECK_THROWS_WITH_AS(op(2).Run1({a, b, F32({2}, {1, 1})}),
                       doctest::Contains("quant_type 2 is neither 0 (FP4) nor 1 (NF4)"), Error);
  CHECK_THROWS_WITH_AS(
      op(1).Run1({a, b, F32({3}, {1, 1, 1})}),
      doctest::Contains("input 'absmax' must be FLOAT (A's type) with (N * K + "
                        "block_size - 1) / block_size = 2 elements, got FLOAT [3]"),
      Error);
  CHECK_THROWS_WITH_AS(
      op(1).Run1({F32({1, 15}, std::vector<float>(15, 1.0f)), b, F32({2}, {1, 1})}),
      doctest::Contains("input 'A' [1, 15] must end in K = 16"), Error);
}
