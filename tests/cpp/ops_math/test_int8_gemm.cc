// math::Int8Gemm (ops/math/int8_gemm.h) against a naive int64 reference of
// sum_k (A - a_zero)(B - b_zero) for every sign combination, zero points absent, per tensor,
// per row / per column, K not a multiple of 4, N not a multiple of 16, rows around the
// kernels' tiles of 4, and operands at the ends of their ranges (exact: integers), and
// math::DynamicUInt8Range / QuantizeUInt8 against the ONNX reference's formulas.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/math/dynamic_quantize.h"
#include "ops/math/int8_gemm.h"

namespace {

using onnx_light::ops::math::Int8Gemm;
using onnx_light::ops::math::PackedInt8B;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed, bool extremes) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = extremes && i % 3 == 0 ? (i % 2 == 0 ? 0x80 : 0x7F) : static_cast<uint8_t>(gen());
  return v;
}

int64_t Value(const std::vector<uint8_t>& v, bool is_signed, size_t i) {
  return is_signed ? static_cast<int8_t>(v[i]) : v[i];
}

void Check(int64_t m, int64_t k, int64_t n, bool a_signed, bool b_signed, int64_t a_zeros,
           int64_t b_zeros, bool extremes, onnx_light::ops::math::VecPath path) {
  CAPTURE(static_cast<int>(path));
  CAPTURE(m);
  CAPTURE(k);
  CAPTURE(n);
  CAPTURE(a_signed);
  CAPTURE(b_signed);
  CAPTURE(a_zeros);
  CAPTURE(b_zeros);
  const int64_t lda = k + 3;  // rows apart by more than K: the kernel must honour lda
  const auto a = RandomBytes(static_cast<size_t>(m * lda), 1, extremes);
  const auto b = RandomBytes(static_cast<size_t>(k * n), 2, extremes);
  const auto az = RandomBytes(static_cast<size_t>(std::max<int64_t>(a_zeros, 1)), 3, false);
  const auto bz = RandomBytes(static_cast<size_t>(std::max<int64_t>(b_zeros, 1)), 4, false);
  const PackedInt8B pack(b.data(), b_signed, k, n, n, b_zeros ? bz.data() : nullptr, b_zeros);
  CHECK(pack.k() == k);
  CHECK(pack.n() == n);
  const int64_t ldc = n + 1;
  std::vector<int32_t> c(static_cast<size_t>(m * ldc), -7);
  Int8Gemm(pack, m, a.data(), a_signed, lda, a_zeros ? az.data() : nullptr, a_zeros, c.data(), ldc,
           path);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t col = 0; col < n; ++col) {
      const int64_t za = a_zeros == 0 ? 0 : Value(az, a_signed, a_zeros == 1 ? 0 : r);
      const int64_t zb = b_zeros == 0 ? 0 : Value(bz, b_signed, b_zeros == 1 ? 0 : col);
      int64_t ref = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        ref += (Value(a, a_signed, r * lda + kk) - za) * (Value(b, b_signed, kk * n + col) - zb);
      REQUIRE(c[static_cast<size_t>(r * ldc + col)] == ref);
    }
  for (int64_t r = 0; r < m; ++r) CHECK(c[static_cast<size_t>(r * ldc + n)] == -7);
}

}  // namespace

TEST_CASE(
    "Int8Gemm is the exact integer product for every sign, zero-point layout and shape, on the "
    "VNNI kernel (where the CPU has it) and the portable loop") {
  for (auto path :
       {onnx_light::ops::math::VecPath::kAuto, onnx_light::ops::math::VecPath::kPortable}) {
    const int64_t shapes[][3] = {{1, 64, 16},  {1, 13, 7},   {3, 100, 40}, {4, 4, 64},
                                 {5, 257, 33}, {9, 31, 130}, {1, 1, 1},    {2, 576, 96}};
    for (const auto& s : shapes)
      for (bool a_signed : {false, true})
        for (bool b_signed : {false, true})
          for (int64_t a_zeros : {int64_t{0}, int64_t{1}, s[0]})
            for (int64_t b_zeros : {int64_t{0}, int64_t{1}, s[2]})
              Check(s[0], s[1], s[2], a_signed, b_signed, a_zeros, b_zeros, false, path);
    // Operands at the ends of their ranges (-128 and 127 bytes) with zero points, long K.
    for (bool a_signed : {false, true})
      for (bool b_signed : {false, true}) Check(3, 4099, 20, a_signed, b_signed, 1, 20, true, path);
  }
}

TEST_CASE(
    "DynamicUInt8Range and QuantizeUInt8 follow the ONNX reference, vector and scalar paths "
    "alike") {
  using onnx_light::ops::math::VecPath;
  for (VecPath path : {VecPath::kAuto, VecPath::kPortable}) {
    CAPTURE(static_cast<int>(path));
    auto DynamicUInt8Range = [&](const float* x, int64_t n) {
      return onnx_light::ops::math::DynamicUInt8Range(x, n, path);
    };
    auto QuantizeUInt8 = [&](const float* x, int64_t n, onnx_light::ops::math::UInt8Quantization q,
                             uint8_t* y) {
      onnx_light::ops::math::QuantizeUInt8(x, n, q, y, path);
    };
    // The reference's example: x = [0, 2, -3, -2.5, 1.34, 0.5] -> scale 5/255, zero point 153.
    const std::vector<float> x = {0.0f, 2.0f, -3.0f, -2.5f, 1.34f, 0.5f};
    const auto q = DynamicUInt8Range(x.data(), static_cast<int64_t>(x.size()));
    CHECK(q.scale == 5.0f / 255.0f);
    CHECK(q.zero_point == 153);
    std::vector<uint8_t> y(x.size());
    QuantizeUInt8(x.data(), static_cast<int64_t>(x.size()), q, y.data());
    CHECK(y == std::vector<uint8_t>{153, 255, 0, 26, 221, 179});
    // All zeros (and nothing at all): scale 1 (onnxruntime's), zero point 0.
    const std::vector<float> zeros(37, 0.0f);
    CHECK(DynamicUInt8Range(zeros.data(), 37).scale == 1.0f);
    CHECK(DynamicUInt8Range(zeros.data(), 37).zero_point == 0);
    CHECK(DynamicUInt8Range(nullptr, 0).zero_point == 0);
    // Only positive values: the range starts at 0; NaN is left out and quantizes to the zero
    // point; 17+ elements take the vector path with a tail.
    std::vector<float> pos(21);
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = 0.5f * static_cast<float>(i);
    pos[4] = std::numeric_limits<float>::quiet_NaN();
    const auto p = DynamicUInt8Range(pos.data(), 21);
    CHECK(p.scale == 10.0f / 255.0f);
    CHECK(p.zero_point == 0);
    std::vector<uint8_t> py(21);
    QuantizeUInt8(pos.data(), 21, p, py.data());
    for (size_t i = 0; i < pos.size(); ++i) {
      const float expect = i == 4 ? 0.0f : std::nearbyint(pos[i] / p.scale);
      CHECK(py[i] == static_cast<uint8_t>(std::fmin(255.0f, expect)));
    }
    // Ties round to even (scale 1, zero point 10): 2.5 -> 2 + 10, 3.5 -> 4 + 10; saturation.
    const onnx_light::ops::math::UInt8Quantization unit{1.0f, 10};
    const std::vector<float> ties = {2.5f, 3.5f, -10.5f, -11.5f, 300.0f};
    std::vector<uint8_t> ty(ties.size());
    QuantizeUInt8(ties.data(), 5, unit, ty.data());
    CHECK(ty == std::vector<uint8_t>{12, 14, 0, 0, 255});
  }
}
