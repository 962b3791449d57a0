#include <cmath>

#include "core/error.h"
#include "op_test_util.h"

using namespace ops_math_test;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;

TEST_CASE("QuantizeLinear per tensor rounds half to even and saturates") {
  const Tensor x = F32({8}, {0.f, 1.f, 2.5f, 3.5f, -2.5f, 300.f, -300.f, 1.49f});
  const Tensor u8 =
      Op("QuantizeLinear", 21)
          .Run1({x, F32({}, {1.f}), Tensor::FromVector<uint8_t>("z", DataType::kUint8, {}, {10})});
  CHECK(u8.dtype() == DataType::kUint8);
  CHECK(IntsOf(u8) == std::vector<int64_t>{10, 11, 12, 14, 8, 255, 0, 11});
  const Tensor def = Op("QuantizeLinear", 21).Run1({x, F32({}, {2.f})});
  CHECK(def.dtype() == DataType::kUint8);  // no zero point: UINT8
  CHECK(IntsOf(def) == std::vector<int64_t>{0, 0, 1, 2, 0, 150, 0, 1});
  const Tensor i8 = Op("QuantizeLinear", 21).Int("output_dtype", 3).Run1({x, F32({1}, {1.f})});
  CHECK(i8.dtype() == DataType::kInt8);
  CHECK(IntsOf(i8) == std::vector<int64_t>{0, 1, 2, 4, -2, 127, -128, 1});
}

TEST_CASE("QuantizeLinear per axis and blocked, INT4 packed, FLOAT16 input and scale") {
  // Per axis 1 of [2, 3]: scales 1, 2, 4.
  const Tensor x = F32({2, 3}, {4, 4, 4, 8, 8, -8});
  const Tensor zp = Tensor::FromVector<int8_t>("z", DataType::kInt8, {3}, {0, 1, -1});
  const Tensor q = Op("QuantizeLinear", 21).Run1({x, F32({3}, {1, 2, 4}), zp});
  CHECK(IntsOf(q) == std::vector<int64_t>{4, 3, 0, 8, 5, -3});
  // Blocked along axis 1 with block 2: x [2, 5], scale [2, 3].
  const Tensor xb = F32({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const Tensor sb = F32({2, 3}, {1, 2, 4, 1, 2, 4});
  const Tensor qb = Op("QuantizeLinear", 21)
                        .Int("axis", 1)
                        .Int("block_size", 2)
                        .Int("output_dtype", 3)
                        .Run1({xb, sb});
  CHECK(IntsOf(qb) == std::vector<int64_t>{1, 2, 2, 2, 1, 6, 7, 4, 4, 2});
  // INT4: two values per byte, saturating to [-8, 7].
  const Tensor q4 = Op("QuantizeLinear", 21)
                        .Int("output_dtype", 22)
                        .Run1({F32({5}, {-20, -3, 0, 3, 20}), F32({}, {1})});
  CHECK(q4.dtype() == DataType::kInt4);
  CHECK(q4.nbytes() == 3);
  CHECK(IntsOf(q4) == std::vector<int64_t>{-8, -3, 0, 3, 7});
  const Tensor qh =
      Op("QuantizeLinear", 21)
          .Run1({Half(DataType::kFloat16, {3}, {1, 2, 3}), Half(DataType::kFloat16, {}, {0.5f})});
  CHECK(IntsOf(qh) == std::vector<int64_t>{2, 4, 6});
}

TEST_CASE("DequantizeLinear per tensor, per axis, blocked, INT4 and 16-bit scales") {
  const Tensor q = Tensor::FromVector<uint8_t>("q", DataType::kUint8, {4}, {0, 10, 128, 255});
  const Tensor y = Op("DequantizeLinear", 21)
                       .Run1({q, F32({}, {0.5f}),
                              Tensor::FromVector<uint8_t>("z", DataType::kUint8, {}, {128})});
  CHECK(y.dtype() == DataType::kFloat);
  CHECK(y.ToFloatVector() == std::vector<float>{-64, -59, 0, 63.5f});
  const Tensor qi = Tensor::FromVector<int8_t>("q", DataType::kInt8, {2, 3}, {1, 2, 3, -1, -2, -3});
  const Tensor ya = Op("DequantizeLinear", 21).Run1({qi, F32({3}, {1, 2, 4})});
  CHECK(ya.ToFloatVector() == std::vector<float>{1, 4, 12, -1, -4, -12});
  const Tensor y0 = Op("DequantizeLinear", 21)
                        .Int("axis", 0)
                        .Run1({qi, F32({2}, {1, 10}),
                               Tensor::FromVector<int8_t>("z", DataType::kInt8, {2}, {1, -1})});
  CHECK(y0.ToFloatVector() == std::vector<float>{0, 1, 2, 0, -10, -20});
  // Blocked: [2, 5] with block 2 along axis 1, scales [2, 3].
  std::vector<int8_t> qv = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const Tensor yb = Op("DequantizeLinear", 21)
                        .Int("axis", 1)
                        .Int("block_size", 2)
                        .Run1({Tensor::FromVector("q", DataType::kInt8, {2, 5}, qv),
                               F32({2, 3}, {1, 2, 4, 1, 2, 4})});
  CHECK(yb.ToFloatVector() == std::vector<float>{1, 2, 6, 8, 20, 6, 7, 16, 18, 40});
  // INT4 with a FLOAT16 scale: output FLOAT16.
  std::vector<uint8_t> packed = {0x9F, 0x07};  // elements: -1, -7, 7, 0 (low nibble first)
  const Tensor q4 = Tensor::FromVector("q", DataType::kInt4, {3}, packed);
  const Tensor y4 = Op("DequantizeLinear", 21).Run1({q4, Half(DataType::kFloat16, {}, {0.5f})});
  CHECK(y4.dtype() == DataType::kFloat16);
  CHECK(y4.ToFloatVector() == std::vector<float>{-0.5f, -3.5f, 3.5f});
  const std::vector<uint8_t> u4 = {0x21};
  const Tensor yu4 = Op("DequantizeLinear", 21)
                         .Run1({Tensor::FromVector("q", DataType::kUint4, {2}, u4),
                                Half(DataType::kBFloat16, {}, {2})});
  CHECK(yu4.dtype() == DataType::kBFloat16);
  CHECK(yu4.ToFloatVector() == std::vector<float>{2, 4});
  // output_dtype (opset 23) overrides the scale's type.
  const Tensor yo = Op("DequantizeLinear", 23).Int("output_dtype", 10).Run1({qi, F32({}, {1})});
  CHECK(yo.dtype() == DataType::kFloat16);
}

TEST_CASE("quantization round trip on odd sizes stays within half a step") {
  for (int64_t n : {1, 3, 17, 67, 129}) {
    const std::vector<float> x = Random(n * 3, -1, 1);
    const Tensor s = F32({3}, {0.01f, 0.02f, 0.005f});
    const Tensor q =
        Op("QuantizeLinear", 21).Int("axis", 0).Int("output_dtype", 3).Run1({F32({3, n}, x), s});
    const std::vector<float> back =
        Op("DequantizeLinear", 21).Int("axis", 0).Run1({q, s}).ToFloatVector();
    const float steps[3] = {0.01f, 0.02f, 0.005f};
    for (int64_t i = 0; i < 3 * n; ++i) {
      const float step = steps[i / n];
      const float clipped = std::clamp(x[i], -128 * step, 127 * step);
      CHECK(std::abs(back[i] - clipped) <= step / 2 + 1e-6f);
    }
  }
}

TEST_CASE("quantization errors name the node, float8 outputs are not implemented") {
  CHECK_THROWS_WITH_AS(
      Op("DequantizeLinear", 21)
          .Run1({Tensor::FromVector<int8_t>("q", DataType::kInt8, {2, 3}, {1, 2, 3, 4, 5, 6}),
                 F32({2}, {1, 1})}),
      "DequantizeLinear node 'n_DequantizeLinear': per-axis scale must have shape "
      "[3] (axis 1 of input shape [2, 3]), got [2]",
      Error);
  CHECK_THROWS_WITH_AS(
      Op("QuantizeLinear", 21).Int("block_size", 2).Run1({RandF32({2, 4}), RandF32({2, 3})}),
      doctest::Contains("blocked scale must have shape [2, 2]"), Error);
  try {
    Op("QuantizeLinear", 21).Int("output_dtype", 17).Run1({RandF32({2}), F32({}, {1})});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) ==
          "QuantizeLinear node 'n_QuantizeLinear': output of type FLOAT8E4M3FN is not supported");
  }
}
