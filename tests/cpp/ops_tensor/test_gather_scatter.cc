#include "op_test_util.h"

using namespace ops_test;

namespace {
std::vector<float> Iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}
}  // namespace

TEST_CASE("GatherElements picks along an axis with negative indices") {
  Tensor data = F({2, 2}, {1, 2, 3, 4});
  Tensor y = Op("GatherElements").Int("axis", 1).Run1({data, I64({2, 2}, {0, 0, 1, -2})});
  CHECK(Values<float>(y) == std::vector<float>{1, 1, 4, 3});
  Tensor z = Op("GatherElements").Run1({F({3, 3}, Iota(9)), I32({2, 3}, {1, 2, 0, 2, 0, 0})});
  CHECK(Values<float>(z) == std::vector<float>{3, 7, 2, 6, 1, 2});
  CHECK(ErrorOf([&] {
          Op("GatherElements").Run1({data, I64({1, 1}, {2})});
        }) == "GatherElements node 'n': index 2 is out of range for axis 0 of size 2");
}

TEST_CASE("GatherND gathers blocks, with and without batch_dims") {
  Tensor data = F({2, 2}, {0, 1, 2, 3});
  CHECK(Values<float>(Op("GatherND").Run1({data, I64({2, 2}, {0, 0, 1, 1})})) ==
        std::vector<float>{0, 3});
  Tensor rows = Op("GatherND").Run1({data, I64({2, 1}, {1, 0})});
  CHECK(rows.shape() == Shape{2, 2});
  CHECK(Values<float>(rows) == std::vector<float>{2, 3, 0, 1});
  Tensor batched =
      Op("GatherND").Int("batch_dims", 1).Run1({F({2, 2, 2}, Iota(8)), I64({2, 1}, {1, 0})});
  CHECK(batched.shape() == Shape{2, 2});
  CHECK(Values<float>(batched) == std::vector<float>{2, 3, 4, 5});
}

TEST_CASE("ScatterND replaces blocks and reduces with add, mul, max and min") {
  Tensor data = F({4}, {1, 2, 3, 4});
  CHECK(Values<float>(Op("ScatterND").Run1({data, I64({2, 1}, {3, 1}), F({2}, {9, 10})})) ==
        std::vector<float>{1, 10, 3, 9});
  CHECK(Values<float>(Op("ScatterND")
                          .Str("reduction", "add")
                          .Run1({data, I64({2, 1}, {0, 0}), F({2}, {5, 6})})) ==
        std::vector<float>{12, 2, 3, 4});
  CHECK(Values<float>(
            Op("ScatterND").Str("reduction", "mul").Run1({data, I64({1, 1}, {1}), F({1}, {5})})) ==
        std::vector<float>{1, 10, 3, 4});
  CHECK(Values<float>(Op("ScatterND")
                          .Str("reduction", "max")
                          .Run1({data, I64({2, 1}, {0, 3}), F({2}, {0, 7})})) ==
        std::vector<float>{1, 2, 3, 7});
  CHECK(Values<float>(Op("ScatterND")
                          .Str("reduction", "min")
                          .Run1({data, I64({2, 1}, {0, 3}), F({2}, {0, 7})})) ==
        std::vector<float>{0, 2, 3, 4});
  Tensor block =
      Op("ScatterND").Run1({F({2, 2}, {0, 0, 0, 0}), I64({1, 1}, {1}), F({1, 2}, {5, 6})});
  CHECK(Values<float>(block) == std::vector<float>{0, 0, 5, 6});
  CHECK(ErrorOf([&] {
          Op("ScatterND", 15).Str("reduction", "max").Run1({data, I64({1, 1}, {1}), F({1}, {5})});
        }) == "ScatterND node 'n': reduction 'max' is not valid at opset 15");
}

TEST_CASE("ScatterElements writes along an axis, with reductions") {
  Tensor data = F({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor y =
      Op("ScatterElements").Int("axis", 1).Run1({data, I64({2, 1}, {2, -3}), F({2, 1}, {7, 8})});
  CHECK(Values<float>(y) == std::vector<float>{0, 0, 7, 8, 0, 0});
  Tensor add = Op("ScatterElements")
                   .Str("reduction", "add")
                   .Run1({F({3}, {1, 1, 1}), I64({3}, {0, 0, 2}), F({3}, {1, 2, 3})});
  CHECK(Values<float>(add) == std::vector<float>{4, 1, 4});
}

TEST_CASE("Tile repeats along each dimension") {
  Tensor y = Op("Tile").Run1({F({2, 2}, {1, 2, 3, 4}), I64({2}, {2, 3})});
  CHECK(y.shape() == Shape{4, 6});
  CHECK(Values<float>(y) ==
        std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  CHECK(Op("Tile").Run1({F({2}, {1, 2}), I64({1}, {0})}).shape() == Shape{0});
}

TEST_CASE("Pad in constant, reflect, edge and wrap modes, with cropping and axes") {
  Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor c = Op("Pad").Run1({x, I64({4}, {0, 1, 1, 0}), F({}, {9})});
  CHECK(c.shape() == Shape{3, 4});
  CHECK(Values<float>(c) == std::vector<float>{9, 1, 2, 3, 9, 4, 5, 6, 9, 9, 9, 9});
  Tensor r = Op("Pad").Str("mode", "reflect").Run1({x, I64({4}, {0, 2, 0, 1})});
  CHECK(Values<float>(r) == std::vector<float>{3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5});
  Tensor e = Op("Pad").Str("mode", "edge").Run1({x, I64({4}, {1, 0, 0, 1})});
  CHECK(Values<float>(e) == std::vector<float>{1, 2, 3, 3, 1, 2, 3, 3, 4, 5, 6, 6});
  Tensor w = Op("Pad", 19).Str("mode", "wrap").Run1({x, I64({4}, {0, 1, 0, 1})});
  CHECK(Values<float>(w) == std::vector<float>{3, 1, 2, 3, 1, 6, 4, 5, 6, 4});
  Tensor crop = Op("Pad").Run1({x, I64({2}, {-1, 1}), std::nullopt, I64({1}, {1})});
  CHECK(crop.shape() == Shape{2, 3});
  CHECK(Values<float>(crop) == std::vector<float>{2, 3, 0, 5, 6, 0});
  Tensor old = Op("Pad", 10).Ints("pads", {1, 0, 0, 0}).Float("value", 7).Run1({x});
  CHECK(Values<float>(old) == std::vector<float>{7, 7, 7, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("NonZero lists coordinates in row-major order") {
  Tensor y = Op("NonZero").Run1({F({2, 2}, {1, 0, 1, 1})});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(Values<int64_t>(y) == std::vector<int64_t>{0, 1, 1, 0, 0, 1});
  CHECK(Op("NonZero").Run1({B({3}, {false, false, false})}).shape() == Shape{1, 0});
}

TEST_CASE("EyeLike, OneHot and Dropout") {
  Tensor eye = Op("EyeLike")
                   .Int("k", 1)
                   .Int("dtype", static_cast<int>(DataType::kInt64))
                   .Run1({F({2, 3}, Iota(6))});
  CHECK(Values<int64_t>(eye) == std::vector<int64_t>{0, 1, 0, 0, 0, 1});
  Tensor oh = Op("OneHot").Run1({I64({3}, {0, -1, 5}), F({}, {3}), F({2}, {0, 1})});
  CHECK(oh.shape() == Shape{3, 3});
  CHECK(Values<float>(oh) == std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0});
  Tensor oh0 =
      Op("OneHot").Int("axis", 0).Run1({I64({2}, {1, 0}), I64({}, {2}), I64({2}, {-1, 4})});
  CHECK(Values<int64_t>(oh0) == std::vector<int64_t>{-1, 4, 4, -1});
  Tensor x = F({2}, {1, 2});
  auto outs = Op("Dropout").Run({x, F({}, {0.5f}), B({}, {false})}, 2);
  CHECK(outs[0].tensor().raw_data() == x.raw_data());
  CHECK(outs[1].tensor().dtype() == DataType::kBool);
  CHECK(Values<uint8_t>(outs[1].tensor()) == std::vector<uint8_t>{1, 1});
  core::ErrorCode code{};
  CHECK(ErrorOf(
            [&] {
              Op("Dropout").Run({x, F({}, {0.5f}), B({}, {true})}, 1);
            },
            &code) ==
        "Dropout node 'n': training_mode with a non-zero ratio (random dropout) is not supported");
  CHECK(code == core::ErrorCode::kNotImplemented);
}
