// Kernels that declare ReadsStridedInput read a strided view (an append-capacity cache,
// core/tensor.h) in place. Called directly here, without the executor's dense copy: each
// must give exactly what it gives for the dense copy of the same values.
#include <memory>

#include "op_test_util.h"

using namespace ops_test;

namespace {

// A [1, 3, 2, 4] view whose (batch, head) blocks hold 5 rows of which 2 are valid.
Tensor Cache() {
  auto storage = std::make_shared<std::vector<float>>(3 * 5 * 4);
  for (size_t i = 0; i < storage->size(); ++i) (*storage)[i] = static_cast<float>(i) * 0.5f;
  Tensor t = Tensor::StridedView("cache", DataType::kFloat, {1, 3, 2, 4}, {60, 20, 4, 1},
                                 storage->data(), storage);
  REQUIRE_FALSE(t.contiguous());
  return t;
}

void CheckSame(const Tensor& from_view, const Tensor& from_dense) {
  CHECK(from_view.dtype() == from_dense.dtype());
  CHECK(from_view.shape() == from_dense.shape());
  CHECK(from_view.ToFloatVector() == from_dense.ToFloatVector());
}

}  // namespace

TEST_CASE("Transpose and Expand read a strided view through its strides") {
  const Tensor view = Cache(), dense = Cache().Contiguous();
  Op transpose("Transpose");
  transpose.Ints("perm", {0, 1, 3, 2});
  CheckSame(transpose.Run1({view}), transpose.Run1({dense}));
  const Tensor unsqueezed = Op("Unsqueeze").Run1({view, I64({1}, {2})});
  CHECK(unsqueezed.strided_data() == view.strided_data());  // still a view
  const Tensor target = I64({5}, {1, 3, 2, 2, 4});
  CheckSame(Op("Expand").Run1({unsqueezed, target}),
            Op("Expand").Run1({Op("Unsqueeze").Run1({dense, I64({1}, {2})}), target}));
}

TEST_CASE("Concat reads a strided first input block by block") {
  const Tensor view = Cache(), dense = Cache().Contiguous();
  const Tensor next = F({1, 3, 1, 4}, std::vector<float>(12, -1.0f));
  for (int64_t axis : {2, 3, 1}) {
    CAPTURE(axis);
    Op concat("Concat");
    concat.Int("axis", axis);
    const Tensor other = axis == 2   ? next
                         : axis == 3 ? F({1, 3, 2, 1}, std::vector<float>(6, 7.0f))
                                     : F({1, 1, 2, 4}, std::vector<float>(8, 3.0f));
    CheckSame(concat.Run1({view, other}), concat.Run1({dense, other}));
  }
}

TEST_CASE("Reshape-like kernels keep a strided view when they can and copy when they must") {
  const Tensor view = Cache(), dense = Cache().Contiguous();
  // Merging the two valid rows of each block is a view: rows stay 20 elements apart.
  const Tensor rows = Op("Reshape").Run1({view, I64({3}, {1, 3, 8})});
  CHECK(rows.strided_data() == view.strided_data());
  CHECK(rows.strides() == Shape{60, 20, 1});
  CheckSame(rows, Op("Reshape").Run1({dense, I64({3}, {1, 3, 8})}));
  // Merging across blocks is not: a dense copy.
  const Tensor flat = Op("Flatten").Int("axis", 1).Run1({view});
  CHECK(flat.contiguous());
  CheckSame(flat, Op("Flatten").Int("axis", 1).Run1({dense}));
  const Tensor squeezed = Op("Squeeze").Run1({view, I64({1}, {0})});
  CHECK(squeezed.strided_data() == view.strided_data());
  CheckSame(squeezed, Op("Squeeze").Run1({dense, I64({1}, {0})}));
  const Tensor same = Op("Identity").Run1({view});
  CHECK(same.strided_data() == view.strided_data());
  CHECK(same.strides() == view.strides());
  CHECK(Values<int64_t>(Op("Shape").Run1({view})) == std::vector<int64_t>{1, 3, 2, 4});
  CHECK(Values<int64_t>(Op("Size").Run1({view})) == std::vector<int64_t>{24});
}

TEST_CASE("MatMul reads a strided operand matrix by matrix") {
  const Tensor view = Cache(), dense = Cache().Contiguous();
  std::vector<float> probs(3 * 5 * 2);
  for (size_t i = 0; i < probs.size(); ++i) probs[i] = 0.1f * static_cast<float>(i % 7);
  const Tensor a = F({1, 3, 5, 2}, probs);
  // As B: probabilities x values (the GPT-2 export's MatMul(probs, present_value)).
  CheckSame(Op("MatMul").Run1({a, view}), Op("MatMul").Run1({a, dense}));
  // As A against one shared matrix: not folded into one GEMM, each block on its own.
  std::vector<float> w(4 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f - 0.1f * static_cast<float>(i);
  CheckSame(Op("MatMul").Run1({view, F({4, 3}, w)}), Op("MatMul").Run1({dense, F({4, 3}, w)}));
  // FLOAT16 strided operands are made dense first.
  auto halves = std::make_shared<std::vector<uint16_t>>(3 * 5 * 4);
  for (size_t i = 0; i < halves->size(); ++i)
    (*halves)[i] = onnx_light::core::FloatToHalf(0.25f * static_cast<float>(i % 9));
  const Tensor half_view = Tensor::StridedView("h", DataType::kFloat16, {1, 3, 2, 4},
                                               {60, 20, 4, 1}, halves->data(), halves);
  std::vector<float> ones(3 * 2 * 2, 1.0f);
  const Tensor half_a = Half({1, 3, 2, 2}, ones);
  CheckSame(Op("MatMul").Run1({half_a, half_view}),
            Op("MatMul").Run1({half_a, half_view.Contiguous()}));
}

TEST_CASE("Attention reads strided past_key and past_value in place") {
  const Tensor q =
      F({1, 3, 1, 4}, {0.1f, 0.2f, 0.3f, 0.4f, -0.1f, 0.5f, 0.0f, 0.2f, 0.3f, -0.2f, 0.1f, 0.0f});
  const Tensor k = F({1, 3, 1, 4}, std::vector<float>(12, 0.25f));
  const Tensor v = F({1, 3, 1, 4}, std::vector<float>(12, 1.5f));
  const Tensor view = Cache(), dense = Cache().Contiguous();
  auto run = [&](const Tensor& past) {
    return Op("Attention", 23).Run({q, k, v, std::nullopt, past, past}, 3);
  };
  const auto a = run(view), b = run(dense);
  for (size_t i = 0; i < 3; ++i) CheckSame(a[i].tensor(), b[i].tensor());
}
