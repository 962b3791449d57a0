#include <cmath>
#include <limits>

#include "core/error.h"
#include "op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;

namespace {

// Reference reduction over `axes` (sorted, non-negative) of a row-major tensor, in double.
std::vector<double> RefReduce(const std::vector<float>& x, const Shape& s,
                              const std::vector<int64_t>& axes, const std::string& kind,
                              Shape* kept_shape) {
  const size_t r = s.size();
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(a)] = true;
  Shape out;
  for (size_t d = 0; d < r; ++d) out.push_back(red[d] ? 1 : s[d]);
  *kept_shape = out;
  const int64_t on = ShapeNumel(out);
  std::vector<double> acc(static_cast<size_t>(on), kind == "max" ? -INFINITY : 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(on), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rem = i, o = 0, os = 1;
    for (size_t d = r; d-- > 0;) {
      const int64_t c = rem % s[d];
      rem /= s[d];
      if (!red[d]) o += c * os;
      os *= out[d];
    }
    if (kind == "max")
      acc[o] = std::max<double>(acc[o], x[i]);
    else
      acc[o] += x[i];
    cnt[o]++;
  }
  if (kind == "mean")
    for (size_t i = 0; i < acc.size(); ++i) acc[i] /= static_cast<double>(cnt[i]);
  return acc;
}

}  // namespace

TEST_CASE("ReduceSum/Mean/Max match a reference for every axis combination") {
  const Shape s{3, 1, 17, 5};
  const std::vector<float> x = Random(ShapeNumel(s), -2, 2);
  const std::vector<std::vector<int64_t>> cases = {
      {}, {0}, {2}, {3}, {0, 2}, {1, 3}, {2, 3}, {0, 1, 2, 3}, {0, 3}, {-1}, {-2, 0}};
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    const std::string kind = std::string(op) == "ReduceSum"    ? "sum"
                             : std::string(op) == "ReduceMean" ? "mean"
                                                               : "max";
    for (const auto& axes : cases) {
      std::vector<int64_t> norm;
      for (int64_t a : axes) norm.push_back(a < 0 ? a + 4 : a);
      std::sort(norm.begin(), norm.end());
      Shape kept;
      const std::vector<double> expected = RefReduce(x, s, norm, kind, &kept);
      for (int keepdims : {0, 1}) {
        CAPTURE(op);
        CAPTURE(axes.size());
        CAPTURE(keepdims);
        std::vector<std::optional<Tensor>> inputs = {F32(s, x)};
        if (!axes.empty()) inputs.push_back(I64({static_cast<int64_t>(axes.size())}, axes));
        const Tensor y = Op(op, 18).Int("keepdims", keepdims).Run1(inputs);
        Shape want;
        for (size_t d = 0; d < 4; ++d) {
          const bool red = norm.empty() || std::find(norm.begin(), norm.end(),
                                                     static_cast<int64_t>(d)) != norm.end();
          if (!red)
            want.push_back(s[d]);
          else if (keepdims)
            want.push_back(1);
        }
        CHECK(y.shape() == want);
        CheckClose(y.ToFloatVector(), expected, 1e-5, 1e-5);
      }
    }
  }
}

TEST_CASE("older opsets take axes from the attribute, ReduceSum-13 from the input") {
  const Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(Op("ReduceMean", 13).Ints("axes", {1}).Run1({x}).ToFloatVector() ==
        std::vector<float>{2, 5});
  CHECK(Op("ReduceMax", 11).Ints("axes", {0}).Int("keepdims", 0).Run1({x}).ToFloatVector() ==
        std::vector<float>{4, 5, 6});
  CHECK(Op("ReduceSum", 13).Run1({x, I64({1}, {0})}).ToFloatVector() ==
        std::vector<float>{5, 7, 9});
}

TEST_CASE("noop_with_empty_axes returns the input, empty axes otherwise reduce everything") {
  const Tensor x = F32({2, 2}, {1, 2, 3, 4});
  const Tensor same = Op("ReduceSum", 18).Int("noop_with_empty_axes", 1).Run1({x, I64({0}, {})});
  CHECK(same.shape() == Shape{2, 2});
  CHECK(same.raw_data() == x.raw_data());
  const Tensor all = Op("ReduceSum", 18).Run1({x, I64({0}, {})});
  CHECK(all.shape() == Shape{1, 1});
  CHECK(all.ToFloatVector() == std::vector<float>{10});
}

TEST_CASE("reductions of an empty set give 0, NaN and the lowest value") {
  const Tensor x = F32({2, 0}, {});
  CHECK(Op("ReduceSum", 18).Run1({x, I64({1}, {1})}).ToFloatVector() == std::vector<float>{0, 0});
  CHECK(std::isnan(Op("ReduceMean", 18).Run1({x, I64({1}, {1})}).ToFloatVector()[0]));
  CHECK(Op("ReduceMax", 18).Run1({x, I64({1}, {1})}).ToFloatVector()[0] ==
        -std::numeric_limits<float>::infinity());
  const Tensor xi = Tensor::FromInt32("x", {1, 0}, {});
  CHECK(Op("ReduceMax", 18).Run1({xi, I64({1}, {1})}).ToInt64Vector() ==
        std::vector<int64_t>{std::numeric_limits<int32_t>::min()});
}

TEST_CASE("reductions on integers, FLOAT16 and BFLOAT16") {
  const Tensor xi = I64({2, 3}, {1, -2, 3, 4, 5, 7});
  CHECK(Op("ReduceSum", 18).Run1({xi, I64({1}, {1})}).ToInt64Vector() ==
        std::vector<int64_t>{2, 16});
  CHECK(Op("ReduceMean", 18).Run1({xi, I64({1}, {1})}).ToInt64Vector() ==
        std::vector<int64_t>{0, 5});
  CHECK(Op("ReduceMax", 18)
            .Run1({Tensor::FromVector<uint8_t>("x", DataType::kUint8, {3}, {1, 200, 3})})
            .ToInt64Vector() == std::vector<int64_t>{200});
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const Tensor y = Op("ReduceMean", 18).Run1({Half(dt, {2, 2}, {1, 2, 3, 5}), I64({1}, {0})});
    CHECK(y.dtype() == dt);
    CHECK(y.ToFloatVector() == std::vector<float>{2, 3.5f});
  }
  CHECK(std::isnan(Op("ReduceMax", 18).Run1({F32({3}, {1, std::nanf(""), 2})}).ToFloatVector()[0]));
}

TEST_CASE("reduction errors name the node") {
  CHECK_THROWS_WITH_AS(Op("ReduceSum", 18).Run1({RandF32({2, 2}), I64({1}, {2})}),
                       "ReduceSum node 'n_ReduceSum': reduction axis 2 is out of range for rank 2",
                       Error);
  CHECK_THROWS_WITH_AS(Op("ReduceSum", 18).Run1({RandF32({2, 2}), I64({2}, {1, -1})}),
                       "ReduceSum node 'n_ReduceSum': reduction axis -1 is repeated", Error);
  CHECK_THROWS_WITH_AS(Op("ReduceSum", 18).Run1({Tensor::FromBool("x", {1}, {true})}),
                       "ReduceSum node 'n_ReduceSum': input 'data' of type BOOL is not supported",
                       Error);
}
