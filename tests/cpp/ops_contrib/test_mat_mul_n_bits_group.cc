// ai.onnx_light.fused::MatMulNBitsGroup (ops/fused/mat_mul_n_bits_group.cc) against one
// com.microsoft MatMulNBits per product: the same bits for one and a few rows (the GEMVs
// compute each column alone), float rounding for a prompt; every zero-point kind; mixed
// zero points refused. tests/python/test_contrib_ops.py checks the plan's grouping.
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/cpp/ops_math/op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;

namespace {

constexpr int64_t kK = 96, kBlock = 32, kBlocks = kK / kBlock;

struct Product {
  int64_t n;
  Tensor b, scales;
  std::optional<Tensor> zero_points;
};

// Zero points: 0 absent, 1 packed UINT8 (two 4-bit blocks a byte), 2 FLOAT.
Product MakeProduct(int64_t n, int zp_kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(n * kBlocks * kBlock / 2));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  Product p{n, Tensor::FromVector("b", DataType::kUint8, {n, kBlocks, kBlock / 2}, b),
            F32({n * kBlocks}, Random(n * kBlocks, 0.01f, 0.1f, seed)), std::nullopt};
  if (zp_kind == 1) {
    std::vector<uint8_t> zp(static_cast<size_t>(n * ((kBlocks + 1) / 2)));
    for (auto& x : zp) x = static_cast<uint8_t>(rng());
    p.zero_points =
        Tensor::FromVector("zp", DataType::kUint8, {static_cast<int64_t>(zp.size())}, zp);
  } else if (zp_kind == 2) {
    p.zero_points = F32({n * kBlocks}, Random(n * kBlocks, 0.0f, 15.0f, seed + 1));
  }
  return p;
}

Tensor Separate(const Product& p, const Tensor& a) {
  return Op("MatMulNBits", 1, "com.microsoft")
      .Int("K", kK)
      .Int("N", p.n)
      .Int("bits", 4)
      .Int("block_size", kBlock)
      .Run1({a, p.b, p.scales, p.zero_points});
}

std::vector<Tensor> Grouped(const std::vector<Product>& products, const Tensor& a) {
  std::vector<std::optional<Tensor>> inputs{a};
  std::vector<int64_t> widths;
  for (const Product& p : products) {
    inputs.insert(inputs.end(), {p.b, p.scales, p.zero_points});
    widths.push_back(p.n);
  }
  return Op("MatMulNBitsGroup", 1, "ai.onnx_light.fused")
      .Int("K", kK)
      .Int("bits", 4)
      .Int("block_size", kBlock)
      .Ints("N", widths)
      .Run(inputs, static_cast<int>(products.size()));
}

}  // namespace

TEST_CASE("MatMulNBitsGroup gives each product's bits for few rows, float rounding beyond") {
  for (int zp_kind : {0, 1, 2})
    for (int64_t m : {1, 3, 9}) {
      CAPTURE(zp_kind);
      CAPTURE(m);
      const std::vector<Product> products = {
          MakeProduct(40, zp_kind, 1), MakeProduct(16, zp_kind, 2), MakeProduct(24, zp_kind, 3)};
      const Tensor a = F32({m, kK}, Random(m * kK, -1.0f, 1.0f, 5));
      const std::vector<Tensor> grouped = Grouped(products, a);
      REQUIRE(grouped.size() == products.size());
      for (size_t i = 0; i < products.size(); ++i) {
        const std::vector<float> want = Separate(products[i], a).ToFloatVector();
        const std::vector<float> got = grouped[i].ToFloatVector();
        CHECK(grouped[i].dim(0) == m);
        CHECK(grouped[i].dim(1) == products[i].n);
        REQUIRE(got.size() == want.size());
        for (size_t j = 0; j < got.size(); ++j) {
          if (m <= 4)
            CHECK(got[j] == want[j]);
          else
            CHECK(std::abs(got[j] - want[j]) <= 1e-5f * (1 + std::abs(want[j])));
        }
      }
    }
}

TEST_CASE("MatMulNBitsGroup refuses products with and without zero points, naming the rule") {
  const std::vector<Product> products = {MakeProduct(16, 1, 1), MakeProduct(16, 0, 2)};
  const Tensor a = F32({1, kK}, Random(kK));
  CHECK_THROWS_WITH_AS(Grouped(products, a),
                       doctest::Contains("every product needs zero points, or none"), Error);
}
