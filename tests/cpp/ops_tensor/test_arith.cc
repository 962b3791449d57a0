#include <cmath>
#include <limits>

#include "op_test_util.h"

using namespace ops_test;

TEST_CASE("Add of same-shape float tensors adds elementwise") {
  Tensor y = Op("Add").Run1({F({2, 2}, {1, 2, 3, 4}), F({2, 2}, {10, 20, 30, 40})});
  CHECK(y.shape() == Shape{2, 2});
  CHECK(Values<float>(y) == std::vector<float>{11, 22, 33, 44});
  CHECK(y.name() == "out0");
}

TEST_CASE("Add broadcasts a scalar on either side") {
  CHECK(Values<float>(Op("Add").Run1({F({3}, {1, 2, 3}), F({}, {10})})) ==
        std::vector<float>{11, 12, 13});
  CHECK(Values<float>(Op("Sub").Run1({F({}, {10}), F({3}, {1, 2, 3})})) ==
        std::vector<float>{9, 8, 7});
}

TEST_CASE("Mul broadcasts in both directions against a naive reference") {
  // a: [2, 1, 3], b: [4, 1] -> [2, 4, 3]
  std::vector<float> av, bv;
  for (int i = 0; i < 6; ++i) av.push_back(static_cast<float>(i + 1));
  for (int i = 0; i < 4; ++i) bv.push_back(static_cast<float>(10 * (i + 1)));
  Tensor y = Op("Mul").Run1({F({2, 1, 3}, av), F({4, 1}, bv)});
  REQUIRE(y.shape() == Shape{2, 4, 3});
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        want.push_back(av[static_cast<size_t>(i * 3 + k)] * bv[static_cast<size_t>(j)]);
  CHECK(Values<float>(y) == want);
}

TEST_CASE("a large broadcast Sub runs in parallel and matches the naive loop") {
  const int64_t rows = 300, cols = 257;
  std::vector<float> a(static_cast<size_t>(rows * cols)), b(static_cast<size_t>(cols));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 97);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
  Tensor y = Op("Sub").Run1({F({rows, cols}, a), F({1, cols}, b)});
  const float* p = y.data<float>();
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (p[r * cols + c] != a[static_cast<size_t>(r * cols + c)] - b[static_cast<size_t>(c)])
        ++bad;
  CHECK(bad == 0);
}

TEST_CASE("Div truncates integers toward zero and rejects a zero divisor by name") {
  Tensor y = Op("Div").Run1(
      {I64({4}, {7, -7, 7, std::numeric_limits<int64_t>::min()}), I64({4}, {2, 2, -2, -1})});
  CHECK(Values<int64_t>(y) == std::vector<int64_t>{3, -3, -3, std::numeric_limits<int64_t>::min()});
  const std::string msg = ErrorOf([] { Op("Div").Run1({I32({2}, {1, 2}), I32({2}, {1, 0})}); });
  CHECK(msg == "Div node 'n': integer division by zero (divisor 'in1')");
  CHECK(Values<float>(Op("Div").Run1({F({2}, {1, -1}), F({}, {0})})) ==
        std::vector<float>{INFINITY, -INFINITY});
}

TEST_CASE("integer Add and Mul wrap like numpy") {
  Tensor y = Op("Add").Run1({Typed<int8_t>(DataType::kInt8, {2}, {127, -128}),
                             Typed<int8_t>(DataType::kInt8, {2}, {1, -1})});
  CHECK(Values<int8_t>(y) == std::vector<int8_t>{-128, 127});
  Tensor z = Op("Mul").Run1({Typed<uint16_t>(DataType::kUint16, {1}, {65535}),
                             Typed<uint16_t>(DataType::kUint16, {1}, {65535})});
  CHECK(Values<uint16_t>(z) == std::vector<uint16_t>{1});
}

TEST_CASE("FLOAT16 Add computes in float and rounds to half") {
  Tensor y = Op("Add").Run1({Half({3}, {1.5f, 2048.f, -0.25f}), Half({3}, {0.25f, 1.f, 0.25f})});
  CHECK(y.dtype() == DataType::kFloat16);
  CHECK(y.ToFloatVector() == std::vector<float>{1.75f, 2048.f, 0.f});  // 2049 rounds to even
}

TEST_CASE("binary ops report incompatible shapes, mixed types and unsupported types") {
  CHECK(ErrorOf([] {
          Op("Add").Run1({F({2, 3}, {1, 2, 3, 4, 5, 6}), F({2}, {1, 2})});
        }) == "Add node 'n': cannot broadcast the shapes of 'in0' [2, 3] and 'in1' [2]");
  CHECK(ErrorOf([] {
          Op("Mul").Run1({F({1}, {1}), I64({1}, {1})});
        }) == "Mul node 'n': inputs must have the same type, got FLOAT ('in0') and INT64 ('in1')");
  core::ErrorCode code{};
  CHECK(ErrorOf(
            [] {
              Op("Add").Run1({B({1}, {true}), B({1}, {true})});
            },
            &code) == "Add node 'n': input of type BOOL is not supported");
  CHECK(code == core::ErrorCode::kNotImplemented);
}

TEST_CASE("binary ops on empty tensors give empty broadcast outputs") {
  Tensor y = Op("Add").Run1({F({0, 3}, {}), F({3}, {1, 2, 3})});
  CHECK(y.shape() == Shape{0, 3});
  CHECK(y.numel() == 0);
}
