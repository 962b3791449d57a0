#include <cmath>
#include <limits>

#include "op_test_util.h"

using namespace ops_test;

namespace {
std::vector<bool> Bools(const Tensor& t) {
  std::vector<bool> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<uint8_t>()[i] != 0);
  return out;
}
}  // namespace

TEST_CASE("comparisons broadcast and return BOOL") {
  Tensor a = F({2, 2}, {1, 2, 3, 4});
  Tensor b = F({2}, {2, 3});
  Tensor lt = Op("Less").Run1({a, b});
  CHECK(lt.dtype() == DataType::kBool);
  CHECK(lt.shape() == Shape{2, 2});
  CHECK(Bools(lt) == std::vector<bool>{true, true, false, false});
  CHECK(Bools(Op("LessOrEqual").Run1({a, b})) == std::vector<bool>{true, true, false, false});
  CHECK(Bools(Op("Greater").Run1({a, b})) == std::vector<bool>{false, false, true, true});
  CHECK(Bools(Op("GreaterOrEqual").Run1({a, b})) == std::vector<bool>{false, false, true, true});
  CHECK(Bools(Op("Equal").Run1({a, F({}, {3})})) == std::vector<bool>{false, false, true, false});
  CHECK(Bools(Op("Equal").Run1({B({2}, {true, false}), B({1}, {false})})) ==
        std::vector<bool>{false, true});
  CHECK(Bools(Op("Equal").Run1(
            {Tensor::FromStrings("s", {2}, {"a", "b"}), Tensor::FromStrings("t", {}, {"b"})})) ==
        std::vector<bool>{false, true});
  CHECK(Bools(Op("Less").Run1({Half({2}, {1, 2}), Half({2}, {2, 2})})) ==
        std::vector<bool>{true, false});
}

TEST_CASE("logical ops work on BOOL and reject other types") {
  Tensor a = B({4}, {false, false, true, true});
  Tensor b = B({4}, {false, true, false, true});
  CHECK(Bools(Op("And").Run1({a, b})) == std::vector<bool>{false, false, false, true});
  CHECK(Bools(Op("Or").Run1({a, b})) == std::vector<bool>{false, true, true, true});
  CHECK(Bools(Op("Xor").Run1({a, b})) == std::vector<bool>{false, true, true, false});
  CHECK(Bools(Op("Not").Run1({a})) == std::vector<bool>{true, true, false, false});
  CHECK(ErrorOf([] {
          Op("And").Run1({F({1}, {1}), F({1}, {1})});
        }) == "And node 'n': input of type FLOAT is not supported");
}

TEST_CASE("Max and Min fold any number of broadcast inputs and propagate NaN") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor y = Op("Max").Run1({F({3}, {1, 5, nan}), F({}, {2}), F({2, 1}, {0, 4})});
  REQUIRE(y.shape() == Shape{2, 3});
  auto v = Values<float>(y);
  CHECK(v[0] == 2);
  CHECK(v[1] == 5);
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 4);
  CHECK(v[4] == 5);
  CHECK(std::isnan(v[5]));
  CHECK(Values<int64_t>(Op("Min").Run1({I64({3}, {1, 5, -3}), I64({3}, {2, 2, 2})})) ==
        std::vector<int64_t>{1, 2, -3});
  Tensor one = F({2}, {1, 2});
  CHECK(Op("Max").Run1({one}).raw_data() == one.raw_data());
  CHECK(ErrorOf([] {
          Op("Min").Run1({F({2}, {1, 2}), F({3}, {1, 2, 3}), F({1}, {0})});
        }) == "Min node 'n': cannot broadcast the shapes of 'in0' [2] and 'in1' [3] and 'in2' [1]");
}

TEST_CASE("Where selects with three-way broadcasting, including strings") {
  Tensor y = Op("Where").Run1({B({2, 1}, {true, false}), F({3}, {1, 2, 3}), F({}, {-1})});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(Values<float>(y) == std::vector<float>{1, 2, 3, -1, -1, -1});
  Tensor s = Op("Where").Run1({B({2}, {false, true}), Tensor::FromStrings("a", {2}, {"a", "b"}),
                               Tensor::FromStrings("c", {2}, {"c", "d"})});
  CHECK(s.strings()[0] == "c");
  CHECK(s.strings()[1] == "b");
  CHECK(ErrorOf([] {
          Op("Where").Run1({F({1}, {1}), F({1}, {1}), F({1}, {1})});
        }) == "Where node 'n': condition must be BOOL, got FLOAT");
}

TEST_CASE("IsNaN and IsInf mark special values, IsInf honours the sign attributes") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = F({4}, {1, nan, inf, -inf});
  CHECK(Bools(Op("IsNaN").Run1({x})) == std::vector<bool>{false, true, false, false});
  CHECK(Bools(Op("IsInf").Run1({x})) == std::vector<bool>{false, false, true, true});
  CHECK(Bools(Op("IsInf").Int("detect_positive", 0).Run1({x})) ==
        std::vector<bool>{false, false, false, true});
  CHECK(Bools(Op("IsNaN").Run1({Half({2}, {nan, 0})})) == std::vector<bool>{true, false});
}

TEST_CASE("Abs, Floor, Ceil, Round and Sign follow numpy") {
  CHECK(Values<float>(Op("Abs").Run1({F({3}, {-1.5f, 0, 2})})) == std::vector<float>{1.5f, 0, 2});
  CHECK(Values<int32_t>(Op("Abs").Run1({I32({2}, {-7, std::numeric_limits<int32_t>::min()})})) ==
        std::vector<int32_t>{7, std::numeric_limits<int32_t>::min()});
  CHECK(Values<float>(Op("Floor").Run1({F({3}, {-1.5f, 0.5f, 2})})) ==
        std::vector<float>{-2, 0, 2});
  CHECK(Values<float>(Op("Ceil").Run1({F({3}, {-1.5f, 0.5f, 2})})) == std::vector<float>{-1, 1, 2});
  CHECK(Values<float>(Op("Round").Run1({F({6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f})})) ==
        std::vector<float>{0, 2, 2, -0, -2, 2});
  CHECK(Values<int64_t>(Op("Sign").Run1({I64({3}, {-5, 0, 9})})) == std::vector<int64_t>{-1, 0, 1});
  CHECK(Op("Sign").Run1({Half({3}, {-2, 0, 0.5f})}).ToFloatVector() ==
        std::vector<float>{-1, 0, 1});
  CHECK(ErrorOf([] { Op("Floor").Run1({I64({1}, {1})}); }) ==
        "Floor node 'n': input of type INT64 is not supported");
}

TEST_CASE("Mod takes the divisor's sign by default and the dividend's with fmod=1") {
  CHECK(Values<int32_t>(Op("Mod").Run1({I32({4}, {-4, 7, 5, -3}), I32({4}, {3, -3, 2, -1})})) ==
        std::vector<int32_t>{2, -2, 1, 0});
  CHECK(Values<int32_t>(Op("Mod").Int("fmod", 1).Run1(
            {I32({3}, {-4, 7, 5}), I32({3}, {3, -3, 2})})) == std::vector<int32_t>{-1, 1, 1});
  CHECK(Values<float>(Op("Mod").Int("fmod", 1).Run1({F({2}, {-4.5f, 7.5f}), F({}, {2})})) ==
        std::vector<float>{-0.5f, 1.5f});
  CHECK(ErrorOf([] {
          Op("Mod").Run1({I64({1}, {1}), I64({1}, {0})});
        }) == "Mod node 'n': integer modulo by zero (divisor 'in1')");
}

TEST_CASE("Pow handles same-type, mixed-type and integer exponents") {
  const auto roots = Values<float>(Op("Pow").Run1({F({3}, {2, 4, 9}), F({}, {0.5f})}));
  CHECK(roots[0] == doctest::Approx(1.41421356).epsilon(1e-7));
  CHECK(roots[1] == 2);
  CHECK(roots[2] == 3);
  CHECK(Values<float>(Op("Pow").Run1({F({2}, {2, 3}), I64({2}, {3, 2})})) ==
        std::vector<float>{8, 9});
  CHECK(Values<int64_t>(Op("Pow").Run1({I64({2}, {3, -2}), I64({2}, {40, 3})})) ==
        std::vector<int64_t>{-6289078614652622815, -8});  // 3**40 wraps as in numpy
  CHECK(Values<int32_t>(Op("Pow").Run1({I32({2}, {4, 2}), F({2}, {0.5f, 3})})) ==
        std::vector<int32_t>{2, 8});
  CHECK(Op("Pow").Run1({Half({1}, {3}), Half({1}, {2})}).ToFloatVector() == std::vector<float>{9});
  CHECK(Values<float>(Op("Pow").Run1({F({3}, {-1.5f, 0.1f, 3}), F({1}, {2})})) ==
        std::vector<float>{2.25f, 0.1f * 0.1f, 9});
  // A scalar exponent of 3 (the tanh GELU's cube): two multiplies, two roundings from pow.
  const std::vector<float> bases = {-1.5f, 0.1f, 3, -0.0f, 1e-13f, 7.7f};
  const auto cubes = Values<float>(Op("Pow").Run1({F({6}, bases), F({}, {3})}));
  for (size_t i = 0; i < bases.size(); ++i) {
    CAPTURE(bases[i]);
    CHECK(cubes[i] == bases[i] * bases[i] * bases[i]);
    CHECK(std::fabs(cubes[i] - std::pow(bases[i], 3.0f)) <=
          std::fabs(std::pow(bases[i], 3.0f)) * 2.4e-7f);
  }
  CHECK(ErrorOf([] {
          Op("Pow").Run1({I64({1}, {2}), I64({1}, {-1})});
        }) == "Pow node 'n': integer base to a negative integer exponent");
}
