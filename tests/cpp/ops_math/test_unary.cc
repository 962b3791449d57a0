#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;

namespace {

// Runs `op` on FLOAT data of odd sizes and compares with `ref` evaluated in double.
void CheckUnaryFloat(const std::string& op, const std::function<double(double)>& ref, float lo,
                     float hi, double rtol = 2e-6, double atol = 1e-7) {
  for (int64_t n : {1, 3, 17, 67, 129, 40000}) {
    CAPTURE(op);
    CAPTURE(n);
    const std::vector<float> x = Random(n, lo, hi);
    const Tensor y = Op(op, 20).Run1({F32({n}, x)});
    CHECK(y.dtype() == DataType::kFloat);
    CHECK(y.shape() == Shape{n});
    std::vector<double> expected;
    for (float v : x) expected.push_back(ref(v));
    CheckClose(y.ToFloatVector(), expected, rtol, atol);
  }
  // FLOAT16/BFLOAT16: computed in float from the rounded inputs, rounded at the end (so
  // within one unit in the last place of the 16-bit type).
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const std::vector<float> x = RoundTo(dt, Random(67, lo, hi));
    const Tensor y = Op(op, 20).Run1({Half(dt, {67}, x)});
    CHECK(y.dtype() == dt);
    std::vector<double> expected;
    for (float v : x) expected.push_back(ref(v));
    CheckClose(y.ToFloatVector(), expected, dt == DataType::kFloat16 ? 1e-3 : 8e-3, 1e-7);
  }
  // DOUBLE keeps double precision.
  const std::vector<double> xd = {0.25, 0.5, 0.75};
  const Tensor yd = Op(op, 20).Run1({Tensor::FromDouble("x", {3}, xd)});
  REQUIRE(yd.dtype() == DataType::kDouble);
  for (int i = 0; i < 3; ++i)
    CHECK(yd.data<double>()[i] == doctest::Approx(ref(xd[i])).epsilon(1e-14));
}

}  // namespace

TEST_CASE("elementwise float ops match the math library on odd sizes and 16-bit types") {
  CheckUnaryFloat(
      "Exp", [](double x) { return std::exp(x); }, -5, 5);
  CheckUnaryFloat(
      "Log", [](double x) { return std::log(x); }, 0.01f, 10);
  CheckUnaryFloat(
      "Sqrt", [](double x) { return std::sqrt(x); }, 0, 10);
  CheckUnaryFloat(
      "Tanh", [](double x) { return std::tanh(x); }, -4, 4);
  CheckUnaryFloat(
      "Erf", [](double x) { return std::erf(x); }, -3, 3);
  CheckUnaryFloat(
      "Sin", [](double x) { return std::sin(x); }, -6, 6, 2e-6, 1e-6);
  CheckUnaryFloat(
      "Cos", [](double x) { return std::cos(x); }, -6, 6, 2e-6, 1e-6);
  CheckUnaryFloat(
      "Reciprocal", [](double x) { return 1.0 / x; }, 0.1f, 5);
  CheckUnaryFloat(
      "Neg", [](double x) { return -x; }, -5, 5);
  CheckUnaryFloat(
      "Relu", [](double x) { return x > 0 ? x : 0; }, -5, 5);
  CheckUnaryFloat(
      "Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20);
  CheckUnaryFloat(
      "Softplus", [](double x) { return std::log1p(std::exp(x)); }, -20, 20);
  CheckUnaryFloat(
      "HardSigmoid", [](double x) { return std::clamp(double{0.2f} * x + double{0.5f}, 0.0, 1.0); },
      -5, 5);
  CheckUnaryFloat(
      "Gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -5, 5, 2e-6,
      1e-6);
}

TEST_CASE("Gelu with approximate=tanh uses the tanh formula") {
  const std::vector<float> x = Random(129, -5, 5);
  const Tensor y = Op("Gelu", 20).Str("approximate", "tanh").Run1({F32({129}, x)});
  std::vector<double> expected;
  for (double v : x)
    expected.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  CheckClose(y.ToFloatVector(), expected, 2e-6, 1e-6);
  CHECK_THROWS_WITH_AS(Op("Gelu", 20).Str("approximate", "fast").Run1({F32({1}, {1.f})}),
                       doctest::Contains("Gelu node 'n_Gelu'"), Error);
}

TEST_CASE("HardSigmoid honours alpha and beta") {
  const Tensor y = Op("HardSigmoid")
                       .Float("alpha", 0.5f)
                       .Float("beta", 0.25f)
                       .Run1({F32({4}, {-1.f, 0.f, 1.f, 3.f})});
  CHECK(y.ToFloatVector() == std::vector<float>{0.f, 0.25f, 0.75f, 1.f});
}

TEST_CASE("Sigmoid and Softplus do not overflow for large inputs") {
  const Tensor s = Op("Sigmoid").Run1({F32({2}, {-200.f, 200.f})});
  CHECK(s.ToFloatVector() == std::vector<float>{0.f, 1.f});
  const Tensor p = Op("Softplus").Run1({F32({2}, {-200.f, 200.f})});
  CHECK(p.ToFloatVector() == std::vector<float>{0.f, 200.f});
}

TEST_CASE("Neg and Relu accept signed integers, other ops reject them naming the node") {
  const Tensor n = Op("Neg").Run1({I64({3}, {-2, 0, 5})});
  CHECK(n.dtype() == DataType::kInt64);
  CHECK(n.ToInt64Vector() == std::vector<int64_t>{2, 0, -5});
  const Tensor r = Op("Relu", 14).Run1({Tensor::FromInt32("x", {3}, {-2, 0, 5})});
  CHECK(r.dtype() == DataType::kInt32);
  CHECK(r.ToInt64Vector() == std::vector<int64_t>{0, 0, 5});
  const std::vector<int8_t> i8 = {-128, -1, 7};
  const Tensor n8 = Op("Neg").Run1({Tensor::FromVector("x", DataType::kInt8, {3}, i8)});
  CHECK(n8.ToInt64Vector() == std::vector<int64_t>{-128, 1, -7});
  try {
    Op("Exp").Run1({I64({1}, {1})});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) == "Exp node 'n_Exp': input 'X' of type INT64 is not supported");
  }
}

TEST_CASE("elementwise ops keep the input's shape, including empty and scalar tensors") {
  const Tensor s = Op("Exp").Run1({F32({}, {0.f})});
  CHECK(s.shape().empty());
  CHECK(s.ToFloatVector() == std::vector<float>{1.f});
  const Tensor e = Op("Tanh").Run1({F32({2, 0, 3}, {})});
  CHECK(e.shape() == Shape{2, 0, 3});
  CHECK(e.numel() == 0);
}

TEST_CASE("exp-based ops are within 3e-7 relative on sizes across vector widths and tails") {
  const std::pair<const char*, std::function<double(double)>> ops[] = {
      {"Exp", [](double x) { return std::exp(x); }},
      {"Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"Tanh", [](double x) { return std::tanh(x); }}};
  // 40000 splits into several parallel chunks of 16384 elements.
  for (int64_t n : {1, 7, 8, 9, 33, 1000, 40000})
    for (const auto& entry : ops) {
      const char* op = entry.first;  // not a structured binding: clang 14 cannot capture one
      const auto& ref = entry.second;
      CAPTURE(op);
      CAPTURE(n);
      const std::vector<float> x = Random(n, -30, 30);
      const Tensor y = Op(op, 20).Run1({F32({n}, x)});
      std::vector<double> expected;
      for (float v : x) expected.push_back(ref(v));
      CheckClose(y.ToFloatVector(), expected, 3e-7, 0);
    }
  // Softplus and Gelu(tanh) take their exp from the same kernel (log1p stays scalar).
  for (int64_t n : {1, 9, 1000}) {
    const std::vector<float> x = Random(n, -30, 30);
    std::vector<double> sp, gt;
    for (double v : x) {
      sp.push_back(std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))));
      gt.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    CheckClose(Op("Softplus").Run1({F32({n}, x)}).ToFloatVector(), sp, 1e-6, 1e-7);
    CheckClose(Op("Gelu", 20).Str("approximate", "tanh").Run1({F32({n}, x)}).ToFloatVector(), gt,
               1e-6, 1e-6);
  }
}

TEST_CASE("exp-based ops: infinities give their limits and NaN stays NaN") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> x = {-inf, inf, nan, -200.f, 200.f, -0.f, 0.f, 100.f, -110.f};
  std::vector<float> e = Op("Exp").Run1({F32({9}, x)}).ToFloatVector();
  CHECK(e[0] == 0.f);
  CHECK(e[1] == inf);
  CHECK(std::isnan(e[2]));
  CHECK(e[3] == 0.f);
  CHECK(e[4] == inf);
  CHECK(e[5] == 1.f);
  CHECK(e[7] == inf);
  CHECK(e[8] == 0.f);
  std::vector<float> s = Op("Sigmoid").Run1({F32({9}, x)}).ToFloatVector();
  CHECK(s[0] == 0.f);
  CHECK(s[1] == 1.f);
  CHECK(std::isnan(s[2]));
  CHECK(s[5] == 0.5f);
  CHECK(s[7] == 1.f);
  CHECK(s[8] == 0.f);
  std::vector<float> t = Op("Tanh").Run1({F32({9}, x)}).ToFloatVector();
  CHECK(t[0] == -1.f);
  CHECK(t[1] == 1.f);
  CHECK(std::isnan(t[2]));
  CHECK(t[3] == -1.f);
  CHECK(std::signbit(t[5]));
  std::vector<float> p = Op("Softplus").Run1({F32({9}, x)}).ToFloatVector();
  CHECK(p[0] == 0.f);
  CHECK(p[1] == inf);
  CHECK(std::isnan(p[2]));
}

TEST_CASE("16-bit exp-based ops convert in blocks and match float within their rounding") {
  // 1000 elements cross the 256-element conversion blocks.
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16})
    for (const char* op : {"Exp", "Sigmoid", "Tanh"}) {
      CAPTURE(op);
      const std::vector<float> x = RoundTo(dt, Random(1000, -4, 4));
      const Tensor y = Op(op, 20).Run1({Half(dt, {1000}, x)});
      CHECK(y.dtype() == dt);
      std::vector<double> expected;
      for (double v : x)
        expected.push_back(std::string(op) == "Exp"    ? std::exp(v)
                           : std::string(op) == "Tanh" ? std::tanh(v)
                                                       : 1 / (1 + std::exp(-v)));
      CheckClose(y.ToFloatVector(), expected, dt == DataType::kFloat16 ? 1e-3 : 8e-3, 1e-7);
    }
}
