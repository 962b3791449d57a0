#include "core/error.h"
#include "op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;

namespace {

// Reference following the ONNX reference implementation: x as [b, s, h, d].
std::vector<double> RefRotary(const std::vector<float>& x, int64_t b, int64_t s, int64_t h,
                              int64_t d, bool rank4, const std::vector<float>& cos,
                              const std::vector<float>& sin, const std::vector<int64_t>* pos,
                              int64_t rot, bool interleaved) {
  std::vector<double> y(x.size());
  const int64_t half = rot / 2;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t hi = 0; hi < h; ++hi) {
        const int64_t off = rank4 ? ((bi * h + hi) * s + si) * d : ((bi * s + si) * h + hi) * d;
        const int64_t row = pos ? (*pos)[bi * s + si] : bi * s + si;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          const double c = cos[row * half + i], sn = sin[row * half + i];
          y[off + i1] = c * x[off + i1] - sn * x[off + i2];
          y[off + i2] = sn * x[off + i1] + c * x[off + i2];
        }
        for (int64_t i = rot; i < d; ++i) y[off + i] = x[off + i];
      }
  return y;
}

}  // namespace

TEST_CASE("RotaryEmbedding: 4-D and 3-D, interleaved or not, with and without position_ids") {
  const int64_t b = 2, s = 3, h = 3, d = 8, max_pos = 11;
  const std::vector<float> x = Random(b * s * h * d, -1, 1, 1);
  const std::vector<int64_t> pos = {4, 0, 10, 1, 2, 3};
  for (int64_t rot : {0, 4, 8})
    for (int interleaved : {0, 1})
      for (bool rank4 : {true, false})
        for (bool with_pos : {true, false}) {
          CAPTURE(rot);
          CAPTURE(interleaved);
          CAPTURE(rank4);
          CAPTURE(with_pos);
          const int64_t r = rot == 0 ? d : rot;
          const int64_t rows = with_pos ? max_pos : b * s;
          const std::vector<float> cos = Random(rows * r / 2, -1, 1, 2),
                                   sin = Random(rows * r / 2, -1, 1, 3);
          const Shape cs = with_pos ? Shape{max_pos, r / 2} : Shape{b, s, r / 2};
          const Shape xs = rank4 ? Shape{b, h, s, d} : Shape{b, s, h * d};
          Op op("RotaryEmbedding", 23);
          op.Int("interleaved", interleaved).Int("rotary_embedding_dim", rot);
          if (!rank4) op.Int("num_heads", h);
          std::vector<std::optional<Tensor>> inputs = {F32(xs, x), F32(cs, cos), F32(cs, sin)};
          if (with_pos) inputs.push_back(I64({b, s}, pos));
          const Tensor y = op.Run1(inputs);
          CHECK(y.shape() == xs);
          CheckClose(
              y.ToFloatVector(),
              RefRotary(x, b, s, h, d, rank4, cos, sin, with_pos ? &pos : nullptr, r, interleaved),
              1e-6, 1e-6);
        }
}

TEST_CASE("RotaryEmbedding on FLOAT16 and a hand-checked rotation") {
  // One head of 4, rotated by 90 degrees on the first pair and 0 on the second.
  const Tensor x = F32({1, 1, 1, 4}, {1, 2, 3, 4});
  const Tensor y =
      Op("RotaryEmbedding", 23).Run1({x, F32({1, 1, 2}, {0, 1}), F32({1, 1, 2}, {1, 0})});
  // non-interleaved pairs (x0, x2) and (x1, x3): (1, 3) -> (-3, 1); (2, 4) unchanged.
  CHECK(y.ToFloatVector() == std::vector<float>{-3, 2, 1, 4});
  const Tensor yi = Op("RotaryEmbedding", 23)
                        .Int("interleaved", 1)
                        .Run1({x, F32({1, 1, 2}, {0, 1}), F32({1, 1, 2}, {1, 0})});
  CHECK(yi.ToFloatVector() == std::vector<float>{-2, 1, 3, 4});
  const Tensor h = Op("RotaryEmbedding", 23)
                       .Run1({Half(DataType::kFloat16, {1, 1, 1, 4}, {1, 2, 3, 4}),
                              Half(DataType::kFloat16, {1, 1, 2}, {0, 1}),
                              Half(DataType::kFloat16, {1, 1, 2}, {1, 0})});
  CHECK(h.dtype() == DataType::kFloat16);
  CHECK(h.ToFloatVector() == std::vector<float>{-3, 2, 1, 4});
}

TEST_CASE("RotaryEmbedding errors name the node") {
  const Tensor x = RandF32({1, 2, 8});
  CHECK_THROWS_WITH_AS(Op("RotaryEmbedding", 23).Run1({x, RandF32({1, 2, 4}), RandF32({1, 2, 4})}),
                       "RotaryEmbedding node 'n_RotaryEmbedding': a 3-D input needs the num_heads "
                       "attribute",
                       Error);
  CHECK_THROWS_WITH_AS(
      Op("RotaryEmbedding", 23)
          .Int("num_heads", 2)
          .Run1({x, RandF32({1, 2, 4}), RandF32({1, 2, 4})}),
      doctest::Contains("without position_ids, cos_cache and sin_cache must have shape [1, 2, 2]"),
      Error);
  CHECK_THROWS_WITH_AS(Op("RotaryEmbedding", 23)
                           .Int("num_heads", 1)
                           .Run1({x, RandF32({4, 4}), RandF32({4, 4}), I64({1, 2}, {0, 4})}),
                       doctest::Contains("position id 4 is outside the caches' [0, 4)"), Error);
}
