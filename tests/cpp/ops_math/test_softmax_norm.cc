#include <cmath>
#include <limits>

#include "core/error.h"
#include "op_test_util.h"
#include "ops/math/gemm.h"
#include "ops/math/rowops.h"

using namespace ops_math_test;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;
namespace math = onnx_light::ops::math;

namespace {

// Softmax along `axis` of a row-major tensor, in double.
std::vector<double> RefSoftmax(const std::vector<float>& x, const Shape& s, int64_t axis,
                               bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis) outer *= s[d];
    if (d > axis) inner *= s[d];
  }
  const int64_t n = s[axis];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double m = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max<double>(m, x[(o * n + i) * inner + j]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[(o * n + i) * inner + j] - m);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[(o * n + i) * inner + j] - m;
        y[(o * n + i) * inner + j] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

}  // namespace

TEST_CASE("Softmax and LogSoftmax match a double reference on any axis and odd sizes") {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool log = std::string(op) == "LogSoftmax";
    for (int64_t n : {1, 3, 17, 67, 129}) {
      CAPTURE(op);
      CAPTURE(n);
      const Shape s{3, n};
      const std::vector<float> x = Random(3 * n, -10, 10);
      const Tensor y = Op(op, 13).Run1({F32(s, x)});
      CheckClose(y.ToFloatVector(), RefSoftmax(x, s, 1, log), 2e-6, 1e-7);
    }
    const Shape s{2, 5, 3};
    const std::vector<float> x = Random(30, -5, 5);
    for (int64_t axis : {0, 1, -1}) {
      const Tensor y = Op(op, 13).Int("axis", axis).Run1({F32(s, x)});
      CheckClose(y.ToFloatVector(), RefSoftmax(x, s, axis < 0 ? axis + 3 : axis, log), 2e-6, 1e-7);
    }
    // Opsets before 13 flatten from `axis` (default 1) on.
    const Tensor y = Op(op, 11).Run1({F32(s, x)});
    CheckClose(y.ToFloatVector(), RefSoftmax(x, {2, 15}, 1, log), 2e-6, 1e-7);
  }
}

TEST_CASE("Softmax rows across vector widths and tails match double, on both row paths") {
  for (int64_t n : {1, 7, 8, 9, 33, 1000}) {
    CAPTURE(n);
    const std::vector<float> x = Random(3 * n, -10, 10);
    for (bool log : {false, true}) {
      CAPTURE(log);
      const std::vector<double> expected = RefSoftmax(x, {3, n}, 1, log);
      const Tensor y = Op(log ? "LogSoftmax" : "Softmax", 13).Run1({F32({3, n}, x)});
      CheckClose(y.ToFloatVector(), expected, 2e-6, 1e-7);
      for (bool simd : {true, false}) {
        CAPTURE(simd);
        std::vector<float> row(x.size());
        for (int64_t r = 0; r < 3; ++r)
          math::SoftmaxRow(x.data() + r * n, row.data() + r * n, n, log, simd);
        CheckClose(row, expected, 2e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("Softmax: a NaN anywhere in a long row (unrolled part, vector, tail) poisons the row") {
  for (int64_t pos : {0, 9, 20, 27, 32}) {
    CAPTURE(pos);
    std::vector<float> x = Random(66, -3, 3);
    x[static_cast<size_t>(pos)] = std::nanf("");
    for (bool simd : {true, false}) {
      std::vector<float> y(66);
      math::SoftmaxRow(x.data(), y.data(), 33, false, simd);
      math::SoftmaxRow(x.data() + 33, y.data() + 33, 33, false, simd);
      for (int i = 0; i < 33; ++i) CHECK(std::isnan(y[i]));
      double sum = 0;
      for (int i = 33; i < 66; ++i) sum += y[i];
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("Softmax: very negative and -inf entries give exactly 0, all -inf rows give NaN") {
  const float ninf = -std::numeric_limits<float>::infinity();
  // 9 entries: one full vector and a tail. The row of -inf has no finite maximum.
  std::vector<float> x = {0.f, -1e30f, ninf, -200.f, 0.f, -1e30f, ninf, -200.f, 0.f};
  for (int i = 0; i < 9; ++i) x.push_back(ninf);
  const std::vector<float> y = Op("Softmax", 13).Run1({F32({2, 9}, x)}).ToFloatVector();
  for (int i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(y[i] == (x[i] == 0.f ? doctest::Approx(1.0 / 3) : doctest::Approx(0.0)));
    if (x[i] != 0.f) CHECK(y[i] == 0.f);
    CHECK(std::isnan(y[9 + i]));
  }
  const std::vector<float> l = Op("LogSoftmax", 13).Run1({F32({2, 9}, x)}).ToFloatVector();
  CHECK(l[0] == doctest::Approx(-std::log(3.0)).epsilon(1e-6));
  CHECK(l[2] == ninf);
  CHECK(std::isnan(l[9]));
}

TEST_CASE("Softmax: -inf entries give 0, a NaN poisons only its row, 16-bit and double") {
  const float ninf = -std::numeric_limits<float>::infinity();
  const Tensor y = Op("Softmax", 13).Run1({F32({2, 3}, {0.f, ninf, 0.f, 1.f, std::nanf(""), 1.f})});
  const std::vector<float> v = y.ToFloatVector();
  CHECK(v[0] == 0.5f);
  CHECK(v[1] == 0.f);
  CHECK(v[2] == 0.5f);
  CHECK(std::isnan(v[3]));
  CHECK(std::isnan(v[4]));
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const std::vector<float> x = RoundTo(dt, Random(67, -4, 4));
    const Tensor h = Op("Softmax", 13).Run1({Half(dt, {1, 67}, x)});
    CHECK(h.dtype() == dt);
    CheckClose(h.ToFloatVector(), RefSoftmax(x, {1, 67}, 1, false),
               dt == DataType::kFloat16 ? 1e-3 : 8e-3, 1e-6);
  }
  const Tensor d = Op("LogSoftmax", 13).Run1({Tensor::FromDouble("x", {2}, {0.0, 0.0})});
  CHECK(d.data<double>()[0] == doctest::Approx(-std::log(2.0)).epsilon(1e-15));
}

namespace {

std::vector<double> RefLayerNorm(const std::vector<float>& x, int64_t rows, int64_t d,
                                 const std::vector<float>& scale, const std::vector<float>* bias,
                                 double eps, bool rms) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[r * d + i];
    mean = rms ? 0 : mean / d;
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    const double inv = 1 / std::sqrt(var / d + eps);
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] = (x[r * d + i] - mean) * inv * scale[i] + (bias ? (*bias)[i] : 0.0);
  }
  return y;
}

}  // namespace

TEST_CASE("LayerNormalization matches a double reference, both row paths, with outputs") {
  for (int64_t d : {1, 3, 17, 67, 129}) {
    CAPTURE(d);
    const std::vector<float> x = Random(4 * d, -3, 3, 1), scale = Random(d, 0.5f, 2, 2),
                             bias = Random(d, -1, 1, 3);
    const std::vector<Tensor> out =
        Op("LayerNormalization", 17)
            .Float("epsilon", 1e-3f)
            .Run({F32({2, 2, d}, x), F32({d}, scale), F32({d}, bias)}, 3);
    CheckClose(out[0].ToFloatVector(), RefLayerNorm(x, 4, d, scale, &bias, 1e-3, false), 1e-5,
               1e-5);
    CHECK(out[1].shape() == Shape{2, 2, 1});
    CHECK(out[1].dtype() == DataType::kFloat);
    CHECK(out[2].shape() == Shape{2, 2, 1});
    double mean0 = 0;
    for (int64_t i = 0; i < d; ++i) mean0 += x[i];
    CHECK(out[1].ToFloatVector()[0] == doctest::Approx(mean0 / d).epsilon(1e-5));
    for (bool simd : {true, false}) {
      std::vector<float> y(static_cast<size_t>(d));
      float mean, inv;
      math::LayerNormRow(x.data(), scale.data(), nullptr, y.data(), d, 1e-3f, &mean, &inv, simd);
      const std::vector<float> row0(x.begin(), x.begin() + d);
      CheckClose(y, RefLayerNorm(row0, 1, d, scale, nullptr, 1e-3, false), 1e-5, 1e-5);
    }
  }
  // axis = 1 normalises over the last two dims; Scale [d] broadcasts over them.
  const std::vector<float> x = Random(2 * 3 * 5, -1, 1);
  const std::vector<float> s5 = Random(5, 0.5f, 1.5f);
  std::vector<float> s15;
  for (int i = 0; i < 3; ++i) s15.insert(s15.end(), s5.begin(), s5.end());
  const Tensor y =
      Op("LayerNormalization", 17).Int("axis", 1).Run1({F32({2, 3, 5}, x), F32({5}, s5)});
  CheckClose(y.ToFloatVector(), RefLayerNorm(x, 2, 15, s15, nullptr, 1e-5, false), 1e-5, 1e-5);
}

TEST_CASE("RMSNormalization and SimplifiedLayerNormalization match a double reference") {
  for (int64_t d : {1, 3, 17, 67, 129}) {
    CAPTURE(d);
    const std::vector<float> x = Random(3 * d, -3, 3, 1), scale = Random(d, 0.5f, 2, 2);
    const Tensor y = Op("RMSNormalization", 23).Run1({F32({3, d}, x), F32({d}, scale)});
    CheckClose(y.ToFloatVector(), RefLayerNorm(x, 3, d, scale, nullptr, 1e-5, true), 1e-5, 1e-5);
    const std::vector<Tensor> s = Op("SimplifiedLayerNormalization", 1, "com.microsoft")
                                      .Float("epsilon", 1e-6f)
                                      .Run({F32({3, d}, x), F32({d}, scale)}, 2);
    CheckClose(s[0].ToFloatVector(), RefLayerNorm(x, 3, d, scale, nullptr, 1e-6, true), 1e-5, 1e-5);
    CHECK(s[1].shape() == Shape{3, 1});
    // onnxruntime's fusion writes the op in the default domain.
    const Tensor s0 = Op("SimplifiedLayerNormalization", 18)
                          .Float("epsilon", 1e-6f)
                          .Run1({F32({3, d}, x), F32({d}, scale)});
    CHECK(s0.ToFloatVector() == s[0].ToFloatVector());
    for (bool simd : {true, false}) {
      std::vector<float> row(static_cast<size_t>(d));
      math::RmsNormRow(x.data(), scale.data(), row.data(), d, 1e-5f, nullptr, simd);
      const std::vector<float> row0(x.begin(), x.begin() + d);
      CheckClose(row, RefLayerNorm(row0, 1, d, scale, nullptr, 1e-5, true), 1e-5, 1e-5);
    }
  }
  // FLOAT16 X: Y is FLOAT16, also with a FLOAT scale (Y takes X's type).
  const std::vector<float> x = RoundTo(DataType::kFloat16, Random(64, -2, 2));
  const std::vector<float> sc = RoundTo(DataType::kFloat16, Random(64, 0.5f, 1.5f));
  const Tensor h =
      Op("RMSNormalization", 23)
          .Run1({Half(DataType::kFloat16, {64}, x), Half(DataType::kFloat16, {64}, sc)});
  CHECK(h.dtype() == DataType::kFloat16);
  CheckClose(h.ToFloatVector(), RefLayerNorm(x, 1, 64, sc, nullptr, 1e-5, true), 1e-3, 1e-3);
  const Tensor f =
      Op("RMSNormalization", 23).Run1({Half(DataType::kFloat16, {64}, x), F32({64}, sc)});
  CHECK(f.dtype() == DataType::kFloat16);
  CheckClose(f.ToFloatVector(), RefLayerNorm(x, 1, 64, sc, nullptr, 1e-5, true), 1e-3, 1e-3);
  const Tensor b =
      Op("LayerNormalization", 17)
          .Run1({Half(DataType::kBFloat16, {64}, x), Half(DataType::kBFloat16, {64}, sc)});
  CHECK(b.dtype() == DataType::kBFloat16);
}

TEST_CASE("normalisation errors name the node and the bad input") {
  CHECK_THROWS_WITH_AS(Op("LayerNormalization", 17).Run1({RandF32({2, 4}), RandF32({3})}),
                       "LayerNormalization node 'n_LayerNormalization': input 'Scale' of shape [3] "
                       "does not broadcast to the normalised shape [4]",
                       Error);
  CHECK_THROWS_WITH_AS(
      Op("RMSNormalization", 23).Int("axis", 2).Run1({RandF32({2, 4}), RandF32({4})}),
      doctest::Contains("axis 2 is out of range for rank 2"), Error);
  try {
    Op("LayerNormalization", 17).Int("stash_type", 11).Run1({RandF32({2, 4}), RandF32({4})});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
  }
  CHECK_THROWS_WITH_AS(Op("Softmax", 13).Run1({I64({2}, {1, 2})}),
                       "Softmax node 'n_Softmax': input 'input' of type INT64 is not supported",
                       Error);
}
