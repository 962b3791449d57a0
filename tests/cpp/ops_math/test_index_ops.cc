// CumSum, ArgMax, TopK and Trilu.
#include <cmath>

#include "core/error.h"
#include "op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;

TEST_CASE("CumSum: forward, exclusive, reverse and both, on any axis") {
  const Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor ax1 = I64({}, {1});
  CHECK(Op("CumSum", 14).Run1({x, ax1}).ToFloatVector() == std::vector<float>{1, 3, 6, 4, 9, 15});
  CHECK(Op("CumSum", 14).Int("exclusive", 1).Run1({x, ax1}).ToFloatVector() ==
        std::vector<float>{0, 1, 3, 0, 4, 9});
  CHECK(Op("CumSum", 14).Int("reverse", 1).Run1({x, ax1}).ToFloatVector() ==
        std::vector<float>{6, 5, 3, 15, 11, 6});
  CHECK(Op("CumSum", 14).Int("reverse", 1).Int("exclusive", 1).Run1({x, ax1}).ToFloatVector() ==
        std::vector<float>{5, 3, 0, 11, 6, 0});
  CHECK(Op("CumSum", 14).Run1({x, Tensor::FromInt32("a", {1}, {-2})}).ToFloatVector() ==
        std::vector<float>{1, 2, 3, 5, 7, 9});
  const Tensor xi = I64({4}, {1, 2, 3, 4});
  CHECK(Op("CumSum", 14).Run1({xi, I64({}, {0})}).ToInt64Vector() ==
        std::vector<int64_t>{1, 3, 6, 10});
  const Tensor h =
      Op("CumSum", 14).Run1({Half(DataType::kFloat16, {3}, {0.5f, 1, 2}), I64({}, {0})});
  CHECK(h.dtype() == DataType::kFloat16);
  CHECK(h.ToFloatVector() == std::vector<float>{0.5f, 1.5f, 3.5f});
  // Odd sizes against a running double sum.
  const std::vector<float> r = Random(129 * 3, -1, 1);
  const std::vector<float> y =
      Op("CumSum", 14).Run1({F32({129, 3}, r), I64({}, {0})}).ToFloatVector();
  std::vector<double> expected(r.size());
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 129; ++i) expected[i * 3 + j] = s += r[i * 3 + j];
  }
  CheckClose(y, expected, 1e-5, 1e-5);
  CHECK_THROWS_WITH_AS(Op("CumSum", 14).Run1({x, I64({}, {2})}),
                       "CumSum node 'n_CumSum': axis 2 is out of range for rank 2", Error);
}

TEST_CASE("ArgMax: axis, keepdims, select_last_index and dtypes") {
  const Tensor x = F32({2, 3}, {1, 5, 5, 7, 2, 7});
  const Tensor a0 = Op("ArgMax", 13).Run1({x});
  CHECK(a0.shape() == Shape{1, 3});
  CHECK(a0.ToInt64Vector() == std::vector<int64_t>{1, 0, 1});
  const Tensor a1 = Op("ArgMax", 13).Int("axis", -1).Int("keepdims", 0).Run1({x});
  CHECK(a1.shape() == Shape{2});
  CHECK(a1.ToInt64Vector() == std::vector<int64_t>{1, 0});
  const Tensor a2 = Op("ArgMax", 13).Int("axis", 1).Int("select_last_index", 1).Run1({x});
  CHECK(a2.shape() == Shape{2, 1});
  CHECK(a2.ToInt64Vector() == std::vector<int64_t>{2, 2});
  CHECK(Op("ArgMax", 13)
            .Int("axis", 1)
            .Run1({Tensor::FromInt32("x", {1, 4}, {3, -1, 9, 9})})
            .ToInt64Vector() == std::vector<int64_t>{2});
  CHECK(Op("ArgMax", 13)
            .Int("axis", 0)
            .Run1({Half(DataType::kBFloat16, {3}, {1, 3, 2})})
            .ToInt64Vector() == std::vector<int64_t>{1});
  const std::vector<float> r = Random(67 * 17, -1, 1);
  const std::vector<int64_t> got =
      Op("ArgMax", 13).Int("axis", 1).Int("keepdims", 0).Run1({F32({67, 17}, r)}).ToInt64Vector();
  for (int i = 0; i < 67; ++i)
    CHECK(got[i] ==
          std::max_element(r.begin() + i * 17, r.begin() + i * 17 + 17) - (r.begin() + i * 17));
}

TEST_CASE("TopK: largest and smallest, ties keep the lower index, any axis") {
  const Tensor x = F32({2, 4}, {1, 4, 4, 2, 9, 0, 3, 9});
  const std::vector<Tensor> t = Op("TopK", 11).Run({x, I64({1}, {2})}, 2);
  CHECK(t[0].shape() == Shape{2, 2});
  CHECK(t[0].ToFloatVector() == std::vector<float>{4, 4, 9, 9});
  CHECK(t[1].dtype() == DataType::kInt64);
  CHECK(t[1].ToInt64Vector() == std::vector<int64_t>{1, 2, 0, 3});
  const std::vector<Tensor> s = Op("TopK", 11).Int("largest", 0).Run({x, I64({1}, {3})}, 2);
  CHECK(s[0].ToFloatVector() == std::vector<float>{1, 2, 4, 0, 3, 9});
  CHECK(s[1].ToInt64Vector() == std::vector<int64_t>{0, 3, 1, 1, 2, 0});
  const std::vector<Tensor> a0 = Op("TopK", 11).Int("axis", 0).Run({x, I64({1}, {1})}, 2);
  CHECK(a0[0].shape() == Shape{1, 4});
  CHECK(a0[0].ToFloatVector() == std::vector<float>{9, 4, 4, 9});
  CHECK(a0[1].ToInt64Vector() == std::vector<int64_t>{1, 0, 0, 1});
  const std::vector<Tensor> i = Op("TopK", 11).Run({I64({5}, {5, 1, 7, 3, 7}), I64({1}, {3})}, 2);
  CHECK(i[0].ToInt64Vector() == std::vector<int64_t>{7, 7, 5});
  CHECK(i[1].ToInt64Vector() == std::vector<int64_t>{2, 4, 0});
  const std::vector<Tensor> z = Op("TopK", 11).Run({x, I64({1}, {0})}, 2);
  CHECK(z[0].shape() == Shape{2, 0});
  CHECK_THROWS_WITH_AS(Op("TopK", 11).Run({x, I64({1}, {5})}, 2),
                       "TopK node 'n_TopK': K = 5 is outside [0, 4] for axis -1", Error);
}

TEST_CASE("Trilu keeps the upper or lower triangle with an offset, batched") {
  std::vector<float> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  const Tensor x = F32({2, 3, 4}, v);
  const Tensor up = Op("Trilu", 14).Run1({x});
  CHECK(up.ToFloatVector() == std::vector<float>{1,  2,  3,  4,  0, 6,  7,  8,  0, 0, 11, 12,
                                                 13, 14, 15, 16, 0, 18, 19, 20, 0, 0, 23, 24});
  const Tensor lo = Op("Trilu", 14).Int("upper", 0).Run1({x, I64({}, {-1})});
  CHECK(lo.ToFloatVector() == std::vector<float>{0, 0, 0, 0, 5,  0, 0, 0, 9,  10, 0, 0,
                                                 0, 0, 0, 0, 17, 0, 0, 0, 21, 22, 0, 0});
  const Tensor up2 = Op("Trilu", 14).Run1({x, I64({}, {2})});
  CHECK(up2.ToFloatVector() == std::vector<float>{0, 0, 3,  4,  0, 0, 0, 8,  0, 0, 0, 0,
                                                  0, 0, 15, 16, 0, 0, 0, 20, 0, 0, 0, 0});
  const Tensor big = Op("Trilu", 14).Int("upper", 0).Run1({x, I64({}, {10})});
  CHECK(big.ToFloatVector() == v);
  const Tensor b = Op("Trilu", 14)
                       .Int("upper", 0)
                       .Run1({Tensor::FromBool("m", {2, 2}, {true, true, true, true})});
  CHECK(b.dtype() == DataType::kBool);
  CHECK(b.ToFloatVector() == std::vector<float>{1, 0, 1, 1});
  CHECK_THROWS_WITH_AS(Op("Trilu", 14).Run1({F32({3}, {1, 2, 3})}),
                       "Trilu node 'n_Trilu': input must have rank >= 2, got 1", Error);
}
