// FLOAT16 at kernel edges and in MatMul weights (ops/math/half_convert.h, half_gemm.h): the
// bulk conversions give the scalar conversions' bits for every input, and the products
// with a FLOAT16 weight, row-major or packed in 16-bit panels, agree with a double
// reference and with each other bit for bit.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "op_test_util.h"
#include "ops/math/half_convert.h"
#include "ops/math/half_gemm.h"

using namespace ops_math_test;
namespace math = onnx_light::ops::math;
using onnx_light::core::FloatToHalf;
using onnx_light::core::HalfToFloat;

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<double> Reference(const std::vector<float>& a, const std::vector<uint16_t>& b,
                              int64_t m, int64_t k, int64_t n) {
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        y[static_cast<size_t>(i * n + j)] += double{a[static_cast<size_t>(i * k + p)]} *
                                             HalfToFloat(b[static_cast<size_t>(p * n + j)]);
  return y;
}

}  // namespace

TEST_CASE("every FLOAT16 value converts to the scalar conversion's FLOAT") {
  std::vector<uint16_t> all(65536 + 5);  // (a length that is no multiple of 8)
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  math::HalvesToFloats(all.data(), out.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    const float expected = HalfToFloat(all[i]);
    if (std::isnan(expected)) {
      CHECK(std::isnan(out[i]));
      CHECK(std::signbit(out[i]) == std::signbit(expected));
    } else if (Bits(out[i]) != Bits(expected)) {
      FAIL("half 0x" << std::hex << all[i] << " gave " << out[i] << ", expected " << expected);
    }
  }
}

TEST_CASE("FLOAT to FLOAT16 gives the scalar conversion's bits, NaN and rounding included") {
  std::vector<float> in;
  // Every 4097th bit pattern (all exponents, both signs), plus the edges that decide rounding.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4097)
    in.push_back(FromBits(static_cast<uint32_t>(u)));
  for (const float f :
       {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f,
        1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), FromBits(0x7f800001u), FromBits(0xffc12345u),
        FromBits(0x7fffffffu)})
    in.push_back(f);
  std::vector<uint16_t> out(in.size());
  math::FloatsToHalves(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    if (out[i] != FloatToHalf(in[i]))
      FAIL("float 0x" << std::hex << Bits(in[i]) << " gave 0x" << out[i] << ", expected 0x"
                      << FloatToHalf(in[i]));
}

TEST_CASE("panels built from a transposed FLOAT16 matrix equal those of its dense transpose") {
  for (const auto& [k, n] :
       std::vector<std::pair<int64_t, int64_t>>{{33, 37}, {64, 16}, {7, 130}}) {
    CAPTURE(k);
    CAPTURE(n);
    const int64_t ld = k + 3;  // rows of the [N, K] source, padded: the stride is honoured
    const std::vector<float> ev = Random(n * ld, -1, 1, 5);
    std::vector<uint16_t> e(ev.size()), b(static_cast<size_t>(k * n));
    for (size_t i = 0; i < ev.size(); ++i) e[i] = FloatToHalf(ev[i]);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        b[static_cast<size_t>(p * n + j)] = e[static_cast<size_t>(j * ld + p)];
    const math::PackedHalfB dense(b.data(), k, n), transposed(e.data(), k, n, ld);
    REQUIRE(dense.bytes() == transposed.bytes());
    for (int64_t q = 0; q < dense.panels(); ++q) {
      const int64_t w = std::min<int64_t>(16, n - 16 * q);
      for (int64_t p = 0; p < k; ++p)
        for (int64_t c = 0; c < w; ++c)
          CHECK(transposed.panel(q)[p * 16 + c] == dense.panel(q)[p * 16 + c]);
    }
  }
}

TEST_CASE("products with a FLOAT16 weight match the reference, row-major and in panels alike") {
  // Odd depths and widths that leave partial 8- and 16-column tails.
  for (const auto& [k, n] :
       std::vector<std::pair<int64_t, int64_t>>{{33, 37}, {64, 16}, {7, 130}}) {
    const std::vector<float> bv = Random(k * n, -1, 1, 3);
    std::vector<uint16_t> b(bv.size());
    for (size_t i = 0; i < bv.size(); ++i) b[i] = FloatToHalf(bv[i]);
    const math::PackedHalfB packed(b.data(), k, n);
    CHECK(packed.bytes() == static_cast<size_t>((n + 15) / 16 * 16 * k) * sizeof(uint16_t));
    for (const int64_t m : {1, 2, 3, 4, 5, 13}) {
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(m);
      const std::vector<float> a = Random(m * k, -1, 1, 4);
      std::vector<float> rows(static_cast<size_t>(m * n), -7.f), panels(rows);
      math::HalfWeightGemm(a.data(), m, k, b.data(), n, rows.data());
      math::HalfWeightGemm(a.data(), m, packed, panels.data());
      CheckClose(rows, Reference(a, b, m, k, n), 1e-5, 1e-5);
      CHECK(rows == panels);
    }
  }
}
