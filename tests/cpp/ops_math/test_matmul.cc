#include <vector>

#include "core/error.h"
#include "op_test_util.h"
#include "ops/math/gemm.h"

using namespace ops_math_test;
using onnx_light::core::Error;
namespace math = onnx_light::ops::math;

namespace {

// Reference batched matmul in double with numpy broadcasting of batch dims (rank >= 2).
std::vector<double> RefMatMul(const std::vector<float>& a, const Shape& as,
                              const std::vector<float>& b, const Shape& bs, Shape* out_shape) {
  const size_t r = std::max(as.size(), bs.size());
  Shape a2(r - as.size(), 1), b2(r - bs.size(), 1);
  a2.insert(a2.end(), as.begin(), as.end());
  b2.insert(b2.end(), bs.begin(), bs.end());
  const int64_t m = a2[r - 2], k = a2[r - 1], n = b2[r - 1];
  Shape batch(r - 2);
  for (size_t i = 0; i + 2 < r; ++i) batch[i] = std::max(a2[i], b2[i]);
  *out_shape = batch;
  out_shape->push_back(m);
  out_shape->push_back(n);
  const int64_t nb = ShapeNumel(batch);
  std::vector<double> out(static_cast<size_t>(nb * m * n), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, aoff = 0, boff = 0, astride = 1, bstride = 1;
    for (size_t d = r - 2; d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      aoff += (a2[d] == 1 ? 0 : idx) * astride;
      boff += (b2[d] == 1 ? 0 : idx) * bstride;
      astride *= a2[d];
      bstride *= b2[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += static_cast<double>(a[aoff * m * k + i * k + p]) * b[boff * k * n + p * n + j];
        out[bi * m * n + i * n + j] = s;
      }
  }
  return out;
}

void CheckMatMul(const Shape& as, const Shape& bs) {
  CAPTURE(onnx_light::core::runtime::ShapeToString(as));
  CAPTURE(onnx_light::core::runtime::ShapeToString(bs));
  const std::vector<float> a = Random(ShapeNumel(as), -1, 1, 1);
  const std::vector<float> b = Random(ShapeNumel(bs), -1, 1, 2);
  Shape expected_shape;
  const std::vector<double> expected = RefMatMul(a, as, b, bs, &expected_shape);
  const Tensor y = Op("MatMul", 13).Run1({F32(as, a), F32(bs, b)});
  CHECK(y.shape() == expected_shape);
  CheckClose(y.ToFloatVector(), expected, 1e-5, 1e-5);
}

}  // namespace

TEST_CASE("MatMul matches a double reference on odd sizes") {
  for (int64_t m : {1, 3, 17, 67, 129})
    for (int64_t n : {1, 3, 17, 129})
      for (int64_t k : {1, 17, 67}) CheckMatMul({m, k}, {k, n});
}

TEST_CASE("MatMul broadcasts batch dimensions") {
  CheckMatMul({2, 3, 5, 7}, {7, 4});           // weight without batch: folded into M
  CheckMatMul({2, 1, 5, 7}, {1, 3, 7, 4});     // both broadcast
  CheckMatMul({5, 7}, {3, 7, 4});              // A broadcast over B's batch
  CheckMatMul({4, 1, 17, 67}, {4, 6, 67, 3});  // attention-like
}

TEST_CASE("MatMul promotes rank-1 operands and drops the added dimension") {
  const Tensor a = F32({3}, {1, 2, 3});
  const Tensor b = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor y = Op("MatMul").Run1({a, b});
  CHECK(y.shape() == Shape{2});
  CHECK(y.ToFloatVector() == std::vector<float>{22, 28});
  const Tensor y2 = Op("MatMul").Run1({F32({2, 3}, {1, 2, 3, 4, 5, 6}), a});
  CHECK(y2.shape() == Shape{2});
  CHECK(y2.ToFloatVector() == std::vector<float>{14, 32});
  const Tensor y3 = Op("MatMul").Run1({a, a});
  CHECK(y3.shape().empty());
  CHECK(y3.ToFloatVector() == std::vector<float>{14});
  const Tensor y4 = Op("MatMul").Run1({F32({2, 2, 3}, {1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0}), a});
  CHECK(y4.shape() == Shape{2, 2});
  CHECK(y4.ToFloatVector() == std::vector<float>{14, 32, 1, 2});
}

TEST_CASE("MatMul on FLOAT16, BFLOAT16, DOUBLE and INT64") {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {0.5f, -1, 2, 0.25f, 1, 1};
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const Tensor y = Op("MatMul").Run1({Half(dt, {2, 3}, a), Half(dt, {3, 2}, b)});
    CHECK(y.dtype() == dt);
    CHECK(y.ToFloatVector() == std::vector<float>{7.5f, 2.5f, 18.f, 3.25f});
  }
  const Tensor d = Op("MatMul").Run1(
      {Tensor::FromDouble("a", {1, 2}, {1.5, 2}), Tensor::FromDouble("b", {2, 1}, {2, 0.25})});
  CHECK(d.dtype() == DataType::kDouble);
  CHECK(d.data<double>()[0] == 3.5);
  const Tensor i = Op("MatMul").Run1({I64({1, 2}, {3, 4}), I64({2, 2}, {1, 2, 3, 4})});
  CHECK(i.ToInt64Vector() == std::vector<int64_t>{15, 22});
}

TEST_CASE("MatMul rejects mismatched shapes and types naming the node") {
  CHECK_THROWS_WITH_AS(Op("MatMul").Run1({RandF32({2, 3}), RandF32({4, 2})}),
                       "MatMul node 'n_MatMul': inner dimensions differ: A has shape [2, 3] and B "
                       "has shape [4, 2]",
                       Error);
  CHECK_THROWS_WITH_AS(Op("MatMul").Run1({RandF32({2, 2, 3}), RandF32({3, 3, 2})}),
                       doctest::Contains("MatMul node 'n_MatMul': shapes"), Error);
  CHECK_THROWS_WITH_AS(Op("MatMul").Run1({RandF32({2, 3}), I64({3, 1}, {1, 2, 3})}),
                       doctest::Contains("A is FLOAT but B is INT64"), Error);
  CHECK_THROWS_WITH_AS(Op("MatMul").Run1({Tensor::FromBool("a", {1, 1}, {true}),
                                          Tensor::FromBool("b", {1, 1}, {true})}),
                       "MatMul node 'n_MatMul': input 'A' of type BOOL is not supported", Error);
}
