#include <cmath>

#include "op_test_util.h"

using namespace ops_test;

namespace {
std::vector<float> Iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}
}  // namespace

TEST_CASE("Flatten, Squeeze and Unsqueeze are views on the input's bytes") {
  Tensor x = F({2, 1, 3}, Iota(6));
  Tensor f = Op("Flatten").Int("axis", -1).Run1({x});
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.raw_data() == x.raw_data());
  CHECK(Op("Flatten").Int("axis", 0).Run1({x}).shape() == Shape{1, 6});
  Tensor s = Op("Squeeze").Run1({x, I64({1}, {-2})});
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.raw_data() == x.raw_data());
  CHECK(s.owner() == x.owner());
  CHECK(Op("Squeeze").Run1({F({1, 2, 1}, {1, 2})}).shape() == Shape{2});
  CHECK(Op("Squeeze", 11).Ints("axes", {0}).Run1({F({1, 2, 1}, {1, 2})}).shape() == Shape{2, 1});
  Tensor u = Op("Unsqueeze").Run1({x, I64({2}, {0, -1})});
  CHECK(u.shape() == Shape{1, 2, 1, 3, 1});
  CHECK(u.raw_data() == x.raw_data());
  CHECK(Op("Unsqueeze", 11).Ints("axes", {1}).Run1({F({2}, {1, 2})}).shape() == Shape{2, 1});
  CHECK(ErrorOf([&] {
          Op("Squeeze").Run1({x, I64({1}, {0})});
        }) ==
        "Squeeze node 'n': cannot squeeze axis 0 of input with shape [2, 1, 3]: its size is not 1");
  CHECK(ErrorOf([&] {
          Op("Unsqueeze").Run1({x, I64({2}, {1, 1})});
        }) == "Unsqueeze node 'n': axes repeat axis 1");
}

TEST_CASE("Size counts elements and Expand broadcasts in both directions") {
  CHECK(Values<int64_t>(Op("Size").Run1({F({2, 0, 3}, {})})) == std::vector<int64_t>{0});
  Tensor e = Op("Expand").Run1({F({3, 1}, {1, 2, 3}), I64({3}, {2, 1, 2})});
  CHECK(e.shape() == Shape{2, 3, 2});
  CHECK(Values<float>(e) == std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  CHECK(ErrorOf([] {
          Op("Expand").Run1({F({3}, {1, 2, 3}), I64({1}, {2})});
        }) == "Expand node 'n': cannot broadcast input of shape [3] to shape [2]");
}

TEST_CASE("Range computes ceil((limit - start) / delta) elements") {
  CHECK(Values<int64_t>(Op("Range").Run1({I64({}, {10}), I64({}, {1}), I64({}, {-3})})) ==
        std::vector<int64_t>{10, 7, 4});
  CHECK(Values<float>(Op("Range").Run1({F({}, {0}), F({}, {1}), F({}, {0.25f})})) ==
        std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(Op("Range").Run1({I32({}, {5}), I32({}, {1}), I32({}, {1})}).shape() == Shape{0});
  CHECK(Op("Range").Run1({Half({}, {1}), Half({}, {5}), Half({}, {2})}).ToFloatVector() ==
        std::vector<float>{1, 3});
  CHECK(ErrorOf([] {
          Op("Range").Run1({I64({}, {0}), I64({}, {1}), I64({}, {0})});
        }) == "Range node 'n': delta must not be zero");
}

TEST_CASE("ConstantOfShape fills with the value attribute, FLOAT 0 by default") {
  Tensor z = Op("ConstantOfShape").Run1({I64({2}, {2, 2})});
  CHECK(z.dtype() == DataType::kFloat);
  CHECK(Values<float>(z) == std::vector<float>{0, 0, 0, 0});
  Op op("ConstantOfShape");
  auto* a = op.node.add_attribute();
  a->set_name("value");
  a->set_type(AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(TensorProto::INT64);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_int64_data(7);
  Tensor s = op.Run1({I64({0}, {})});
  CHECK(s.shape() == Shape{});
  CHECK(Values<int64_t>(s) == std::vector<int64_t>{7});
}

TEST_CASE("Split along axis 0 returns views, other axes copy, sizes come from every form") {
  Tensor x = F({4, 2}, Iota(8));
  auto parts = Op("Split").Run({x, I64({2}, {1, 3})}, 2);
  CHECK(parts[0].tensor().shape() == Shape{1, 2});
  CHECK(parts[1].tensor().shape() == Shape{3, 2});
  CHECK(parts[0].tensor().raw_data() == x.raw_data());
  CHECK(parts[1].tensor().raw_data() == x.data<float>() + 2);
  CHECK(parts[1].tensor().owner() == x.owner());
  auto cols = Op("Split").Int("axis", 1).Run({x}, 2);
  CHECK(Values<float>(cols[0].tensor()) == std::vector<float>{0, 2, 4, 6});
  CHECK(Values<float>(cols[1].tensor()) == std::vector<float>{1, 3, 5, 7});
  auto odd = Op("Split").Int("num_outputs", 3).Run({F({5}, Iota(5))}, 3);
  CHECK(Values<float>(odd[0].tensor()) == std::vector<float>{0, 1});
  CHECK(Values<float>(odd[1].tensor()) == std::vector<float>{2, 3});
  CHECK(Values<float>(odd[2].tensor()) == std::vector<float>{4});
  auto uneven = Op("Split").Int("num_outputs", 3).Run({F({4}, Iota(4))}, 3);
  CHECK(uneven[2].tensor().shape() == Shape{0});
  auto old = Op("Split", 11).Ints("split", {3, 1}).Run({F({4}, Iota(4))}, 2);
  CHECK(Values<float>(old[1].tensor()) == std::vector<float>{3});
  CHECK(ErrorOf([&] {
          Op("Split").Run({x, I64({2}, {1, 2})}, 2);
        }) == "Split node 'n': split sizes add up to 3 but axis 0 of input shape [4, 2] has 4");
  CHECK(ErrorOf([&] { Op("Split").Run({F({5}, Iota(5))}, 2); }) ==
        "Split node 'n': cannot split axis 0 of size 5 into 2 equal parts");
}

TEST_CASE("Slice handles negative steps, clamping and axes against a naive reference") {
  Tensor x = F({3, 4}, Iota(12));
  // Rows reversed from the last, every second column from 1, ends clamped.
  Tensor y = Op("Slice").Run1(
      {x, I64({2}, {-1, 1}), I64({2}, {-100, 100}), I64({2}, {0, 1}), I64({2}, {-1, 2})});
  CHECK(y.shape() == Shape{3, 2});
  CHECK(Values<float>(y) == std::vector<float>{9, 11, 5, 7, 1, 3});
  Tensor col = Op("Slice").Run1({x, I64({1}, {-2}), I64({1}, {INT64_MAX}), I64({1}, {-1})});
  CHECK(col.shape() == Shape{3, 2});
  CHECK(Values<float>(col) == std::vector<float>{2, 3, 6, 7, 10, 11});
  Tensor empty = Op("Slice").Run1({x, I64({1}, {2}), I64({1}, {1})});
  CHECK(empty.shape() == Shape{0, 4});
  Tensor old = Op("Slice", 9).Ints("starts", {1}).Ints("ends", {3}).Ints("axes", {1}).Run1({x});
  CHECK(Values<float>(old) == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(ErrorOf([&] {
          Op("Slice").Run1({x, I64({1}, {0}), I64({1}, {1}), I64({1}, {0}), I64({1}, {0})});
        }) == "Slice node 'n': steps must not be 0");
}

TEST_CASE("Slice of a contiguous block is a view on the input's bytes") {
  Tensor x = F({1, 2, 4, 3}, Iota(24));
  // Like a KV cache [1, heads, seq, dim] cut along seq for one head: one block.
  Tensor y = Op("Slice").Run1({x, I64({2}, {1, 1}), I64({2}, {2, 3}), I64({2}, {1, 2})});
  CHECK(y.shape() == Shape{1, 1, 2, 3});
  CHECK(y.raw_data() == x.data<float>() + 15);
  CHECK(y.owner() == x.owner());
  CHECK(Values<float>(y) == std::vector<float>{15, 16, 17, 18, 19, 20});
  // Across both heads it is not one block: a copy with the right values.
  Tensor z = Op("Slice").Run1({x, I64({1}, {3}), I64({1}, {4}), I64({1}, {2})});
  CHECK(z.raw_data() != x.raw_data());
  CHECK(Values<float>(z) == std::vector<float>{9, 10, 11, 21, 22, 23});
}

TEST_CASE("Cast converts between numeric types like numpy astype") {
  Tensor y = Op("Cast")
                 .Int("to", static_cast<int>(DataType::kInt32))
                 .Run1({F({5}, {1.9f, -1.9f, 300.f, -0.5f, 2.5f})});
  CHECK(Values<int32_t>(y) == std::vector<int32_t>{1, -1, 300, 0, 2});
  Tensor u8 =
      Op("Cast").Int("to", static_cast<int>(DataType::kUint8)).Run1({F({2}, {-1.f, 300.f})});
  CHECK(Values<uint8_t>(u8) == std::vector<uint8_t>{255, 44});
  Tensor h =
      Op("Cast").Int("to", static_cast<int>(DataType::kFloat16)).Run1({I64({2}, {3, -2049})});
  CHECK(h.ToFloatVector() == std::vector<float>{3, -2048});
  Tensor bf = Op("Cast").Int("to", static_cast<int>(DataType::kBFloat16)).Run1({h});
  CHECK(bf.ToFloatVector() == std::vector<float>{3, -2048});
  Tensor b =
      Op("Cast").Int("to", static_cast<int>(DataType::kBool)).Run1({F({3}, {0, -0.5f, NAN})});
  CHECK(Values<uint8_t>(b) == std::vector<uint8_t>{0, 1, 1});
  Tensor same = F({1}, {1});
  CHECK(Op("Cast").Int("to", 1).Run1({same}).raw_data() == same.raw_data());
}

TEST_CASE("Cast to and from INT4/UINT4 wraps and packs low nibble first") {
  Tensor i4 =
      Op("Cast").Int("to", static_cast<int>(DataType::kInt4)).Run1({F({5}, {-9, -8, 7, 8, 3.7f})});
  CHECK(i4.nbytes() == 3);
  std::vector<int32_t> got;
  for (int64_t i = 0; i < 5; ++i) got.push_back(core::PackedGet(DataType::kInt4, i4.raw_data(), i));
  CHECK(got == std::vector<int32_t>{7, -8, 7, -8, 3});
  CHECK(i4.data<uint8_t>()[0] == 0x87);
  Tensor back = Op("Cast").Int("to", 1).Run1({i4});
  CHECK(Values<float>(back) == std::vector<float>{7, -8, 7, -8, 3});
  Tensor u4 =
      Op("CastLike").Run1({I64({3}, {-1, 16, 5}), Tensor(Tensor("like", DataType::kUint4, {1}))});
  std::vector<int32_t> ug;
  for (int64_t i = 0; i < 3; ++i) ug.push_back(core::PackedGet(DataType::kUint4, u4.raw_data(), i));
  CHECK(ug == std::vector<int32_t>{15, 0, 5});
}

TEST_CASE("Cast reports unsupported targets as not implemented") {
  core::ErrorCode code{};
  CHECK(
      ErrorOf([] { Op("Cast").Int("to", static_cast<int>(DataType::kString)).Run1({F({1}, {1})}); },
              &code) == "Cast node 'n': casting between STRING and numbers is not supported");
  CHECK(code == core::ErrorCode::kNotImplemented);
  CHECK(ErrorOf([] {
          Op("Cast").Int("to", static_cast<int>(DataType::kFloat4E2M1)).Run1({F({1}, {1})});
        }) == "Cast node 'n': target of type FLOAT4E2M1 is not supported");
}

TEST_CASE("Cast to float8 rounds to nearest even and saturates unless told not to") {
  const float tiny = 1.f / 1024;  // 2^-10: halfway between 0 and the smallest subnormal
  Tensor x = F({6}, {0.3f, -1000, 464, 465, tiny, 3 * tiny});
  const int e4m3 = static_cast<int>(DataType::kFloat8E4M3FN);
  // Expected codes from ml_dtypes (no saturation) and ONNX's saturate_cast.
  CHECK(Values<uint8_t>(Op("Cast").Int("to", e4m3).Int("saturate", 0).Run1({x})) ==
        std::vector<uint8_t>{42, 255, 126, 127, 0, 2});
  Tensor sat = Op("Cast").Int("to", e4m3).Run1({x});
  CHECK(Values<uint8_t>(sat) == std::vector<uint8_t>{42, 254, 126, 126, 0, 2});
  CHECK(Values<float>(Op("Cast").Int("to", 1).Run1({sat})) ==
        std::vector<float>{0.3125f, -448, 448, 448, 0, 0.00390625f});
  CHECK(Values<uint8_t>(Op("Cast")
                            .Int("to", static_cast<int>(DataType::kFloat8E5M2))
                            .Int("saturate", 0)
                            .Run1({F({3}, {61440, 57344, -1000})})) ==
        std::vector<uint8_t>{124, 123, 228});
  CHECK(Values<uint8_t>(Op("Cast")
                            .Int("to", static_cast<int>(DataType::kFloat8E4M3FNUZ))
                            .Int("saturate", 0)
                            .Run1({F({3}, {-0.f, 250, 2 * tiny})})) ==
        std::vector<uint8_t>{0, 128, 2});
  // NaN and infinities (codes from the ONNX backend test data).
  Tensor special = F({3}, {NAN, INFINITY, -INFINITY});
  CHECK(Values<uint8_t>(
            Op("Cast").Int("to", static_cast<int>(DataType::kFloat8E5M2)).Run1({special})) ==
        std::vector<uint8_t>{126, 123, 251});
  CHECK(Values<uint8_t>(
            Op("Cast").Int("to", static_cast<int>(DataType::kFloat8E4M3FNUZ)).Run1({special})) ==
        std::vector<uint8_t>{128, 127, 255});
  CHECK(Values<uint8_t>(Op("Cast")
                            .Int("to", static_cast<int>(DataType::kFloat8E4M3FNUZ))
                            .Int("saturate", 0)
                            .Run1({special})) == std::vector<uint8_t>{128, 128, 128});
  CHECK(Values<uint8_t>(Op("Cast")
                            .Int("to", static_cast<int>(DataType::kFloat8E5M2))
                            .Int("saturate", 0)
                            .Run1({special})) == std::vector<uint8_t>{126, 124, 252});
}
