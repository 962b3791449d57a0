#include "op_test_util.h"

using namespace ops_test;

TEST_CASE("Reshape returns a view on the input's bytes with 0 and -1 resolved") {
  Tensor x = F({2, 3, 4}, std::vector<float>(24, 1.f));
  Tensor y = Op("Reshape").Run1({x, I64({3}, {0, -1, 2})});
  CHECK(y.shape() == Shape{2, 6, 2});
  CHECK(y.raw_data() == x.raw_data());
  CHECK(y.owner() == x.owner());
  CHECK(y.name() == "out0");
}

TEST_CASE("Reshape with allowzero keeps a literal 0 and rejects bad shapes by name") {
  Tensor y = Op("Reshape", 14).Int("allowzero", 1).Run1({F({0, 3}, {}), I64({2}, {3, 0})});
  CHECK(y.shape() == Shape{3, 0});
  CHECK(ErrorOf([] {
          Op("Reshape").Run1({F({2, 3}, {1, 2, 3, 4, 5, 6}), I64({2}, {4, -1})});
        }) == "Reshape node 'n': cannot reshape input of shape [2, 3] to [4, -1]");
  CHECK(ErrorOf([] {
          Op("Reshape").Run1({F({2, 3}, {1, 2, 3, 4, 5, 6}), I64({2}, {-1, -1})});
        }) == "Reshape node 'n': shape [-1, -1] has more than one -1");
  CHECK(ErrorOf([] {
          Op("Reshape").Run1({F({6}, {1, 2, 3, 4, 5, 6}), I64({2}, {5, 0})});
        }) == "Reshape node 'n': shape [5, 0] copies dimension 1 but the input has shape [6]");
}

TEST_CASE("Transpose permutes dimensions, by default reversing them") {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor y = Op("Transpose").Ints("perm", {1, 0, 2}).Run1({F({2, 3, 4}, v)});
  CHECK(y.shape() == Shape{3, 2, 4});
  const float* p = y.data<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k)
        CHECK(p[(i * 2 + j) * 4 + k] == v[static_cast<size_t>((j * 3 + i) * 4 + k)]);
  Tensor t = Op("Transpose").Run1({F({2, 3}, {1, 2, 3, 4, 5, 6})});
  CHECK(t.shape() == Shape{3, 2});
  CHECK(Values<float>(t) == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(ErrorOf([] {
          Op("Transpose").Ints("perm", {0, 0}).Run1({F({1, 1}, {1})});
        }) == "Transpose node 'n': perm repeats axis 0");
}

TEST_CASE("Transpose that moves only axes of size 1 is a view on the input's bytes") {
  // Decode's [1, 1, heads, D] -> [1, heads, 1, D]: the row-major order does not change.
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const Tensor x = F({1, 1, 3, 2}, v);
  Tensor y = Op("Transpose").Ints("perm", {0, 2, 1, 3}).Run1({x});
  CHECK(y.shape() == Shape{1, 3, 1, 2});
  CHECK(y.contiguous());
  CHECK(y.raw_data() == x.raw_data());
  CHECK(Values<float>(y) == v);
  // Two axes longer than 1 swap: a copy in the new order.
  Tensor z = Op("Transpose").Ints("perm", {0, 3, 1, 2}).Run1({x});
  CHECK(z.shape() == Shape{1, 2, 1, 3});
  CHECK(z.raw_data() != x.raw_data());
  CHECK(Values<float>(z) == std::vector<float>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("Transpose of FLOAT16 and STRING moves elements unchanged") {
  Tensor h = Op("Transpose").Run1({Half({2, 2}, {1, 2, 3, 4})});
  CHECK(h.dtype() == DataType::kFloat16);
  CHECK(h.ToFloatVector() == std::vector<float>{1, 3, 2, 4});
  Tensor s = Op("Transpose").Run1({Tensor::FromStrings("s", {2, 2}, {"a", "b", "c", "d"})});
  CHECK(std::vector<std::string>(s.strings().begin(), s.strings().end()) ==
        std::vector<std::string>{"a", "c", "b", "d"});
}

TEST_CASE("Concat joins along a negative axis, including empty inputs") {
  Tensor y = Op("Concat")
                 .Int("axis", -1)
                 .Run1({F({2, 1}, {1, 2}), F({2, 0}, {}), F({2, 2}, {3, 4, 5, 6})});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(Values<float>(y) == std::vector<float>{1, 3, 4, 2, 5, 6});
  CHECK(ErrorOf([] {
          Op("Concat").Int("axis", 0).Run1({F({2, 1}, {1, 2}), F({1, 2}, {3, 4})});
        }) ==
        "Concat node 'n': inputs must match in every dimension but axis 0: 'in0' [2, 1] and 'in1' "
        "[1, 2]");
}

TEST_CASE("Gather picks rows with negative indices and keeps the indices' shape") {
  Tensor data = F({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor y = Op("Gather").Run1({data, I64({2, 1}, {-1, 0})});
  CHECK(y.shape() == Shape{2, 1, 2});
  CHECK(Values<float>(y) == std::vector<float>{5, 6, 1, 2});
  Tensor c = Op("Gather").Int("axis", 1).Run1({data, I32({}, {1})});
  CHECK(c.shape() == Shape{3});
  CHECK(Values<float>(c) == std::vector<float>{2, 4, 6});
  CHECK(ErrorOf([&] {
          Op("Gather").Run1({data, I64({1}, {3})});
        }) == "Gather node 'n': index 3 is out of range for axis 0 of size 3 (data shape [3, 2])");
}

TEST_CASE("Shape returns the dimensions, sliced and clamped by start and end") {
  Tensor x = F({2, 3, 4}, std::vector<float>(24));
  CHECK(Values<int64_t>(Op("Shape").Run1({x})) == std::vector<int64_t>{2, 3, 4});
  CHECK(Values<int64_t>(Op("Shape").Int("start", -2).Run1({x})) == std::vector<int64_t>{3, 4});
  CHECK(Values<int64_t>(Op("Shape").Int("start", 1).Int("end", 100).Run1({x})) ==
        std::vector<int64_t>{3, 4});
  CHECK(Op("Shape").Int("start", 2).Int("end", 1).Run1({x}).shape() == Shape{0});
}

TEST_CASE("Constant hands out the same read-only bytes on every call") {
  Op op("Constant");
  op.Ints("value_ints", {1, 2, 3});
  Tensor y = op.Run1({});
  CHECK(Values<int64_t>(y) == std::vector<int64_t>{1, 2, 3});
  CHECK(!y.writable());
  CHECK(Values<float>(Op("Constant").Float("value_float", 2.5f).Run1({})) ==
        std::vector<float>{2.5f});
  CHECK(Op("Constant").Float("value_float", 2.5f).Run1({}).shape() == Shape{});
  CHECK(Op("Constant").Str("value_string", "hi").Run1({}).strings()[0] == "hi");
  Op t("Constant");
  auto* a = t.node.add_attribute();
  a->set_name("value");
  a->set_type(AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(TensorProto::FLOAT);
  a->mutable_t()->add_dims(2);
  a->mutable_t()->add_float_data(1.5f);
  a->mutable_t()->add_float_data(-2.f);
  Tensor v = t.Run1({});
  CHECK(v.shape() == Shape{2});
  CHECK(Values<float>(v) == std::vector<float>{1.5f, -2.f});
  CHECK(ErrorOf([] { Op("Constant").Run1({}); }) ==
        "Constant node 'n': needs exactly one value attribute, got 0");
}
