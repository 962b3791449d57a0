#include <doctest/doctest.h>

#include <string>

#include "executor/runtime_session.h"
#include "test_kernels.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::Error;
using onnx_light::testing::Floats;
using onnx_light::testing::ParseModelText;

namespace {

std::string Node(const std::string& op, std::vector<std::string> ins, const std::string& out,
                 const std::string& attrs = "") {
  std::string s = "node { name: \"" + out + "_node\" op_type: \"" + op + "\" ";
  for (const auto& i : ins) s += "input: \"" + i + "\" ";
  return s + "output: \"" + out + "\" " + attrs + "} ";
}

std::string IntAttr(const std::string& name, int64_t v) {
  return "attribute { name: \"" + name + "\" type: INT i: " + std::to_string(v) + " } ";
}

}  // namespace

TEST_CASE("sequence operators build, read, edit, concatenate and split sequences") {
  auto model = ParseModelText(
      "ir_version: 10 opset_import { domain: \"\" version: 18 } graph { "
      "input { name: \"a\" } input { name: \"b\" } input { name: \"m\" } "
      "initializer { name: \"zero\" data_type: 7 int64_data: 0 } "
      "initializer { name: \"minus_one\" data_type: 6 int32_data: -1 } "
      "initializer { name: \"lengths\" data_type: 7 dims: 2 int64_data: [1, 2] } " +
      Node("SequenceEmpty", {}, "e", IntAttr("dtype", 1)) +
      Node("SequenceInsert", {"e", "a"}, "s1") + Node("SequenceInsert", {"s1", "b", "zero"}, "s2") +
      Node("SequenceLength", {"s2"}, "len") + Node("SequenceLength", {"s1"}, "len1") +
      Node("SequenceAt", {"s2", "minus_one"}, "at") + Node("SequenceErase", {"s2"}, "er") +
      Node("SequenceLength", {"er"}, "er_len") + Node("SequenceAt", {"er", "zero"}, "er0") +
      Node("ConcatFromSequence", {"s2"}, "cat", IntAttr("axis", 0)) +
      Node("ConcatFromSequence", {"s2"}, "stk", IntAttr("axis", -1) + IntAttr("new_axis", 1)) +
      Node("SequenceConstruct", {"a", "b"}, "sc") +
      Node("SplitToSequence", {"m", "lengths"}, "sp", IntAttr("axis", 1)) +
      Node("SplitToSequence", {"m"}, "rows", IntAttr("keepdims", 0)) +
      "output { name: \"s1\" } output { name: \"len\" } output { name: \"len1\" } "
      "output { name: \"at\" } output { name: \"er_len\" } output { name: \"er0\" } "
      "output { name: \"cat\" } output { name: \"stk\" } output { name: \"sc\" } "
      "output { name: \"sp\" } output { name: \"rows\" } }");
  RuntimeContext ctx;
  RuntimeSession session(model);
  Tensor a = Floats("a", {2}, {1, 2});
  Tensor m = Floats("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  const void* a_bytes = a.raw_data();
  const auto* m_bytes = static_cast<const float*>(m.raw_data());
  RuntimeValueMap feeds;
  feeds["a"] = RuntimeValue(std::move(a));
  feeds["b"] = RuntimeValue(Floats("b", {2}, {3, 4}));
  feeds["m"] = RuntimeValue(std::move(m));
  auto out = session.Run(ctx, std::move(feeds));

  CHECK(out.at("len").tensor().ToInt64Vector() == std::vector<int64_t>{2});
  CHECK(out.at("len1").tensor().ToInt64Vector() == std::vector<int64_t>{1});  // s1 unchanged
  CHECK(out.at("s1").elements().size() == 1);
  CHECK(out.at("at").tensor().raw_data() == a_bytes);  // SequenceAt shares the element
  CHECK(out.at("at").tensor().name() == "at");
  CHECK(out.at("er_len").tensor().ToInt64Vector() == std::vector<int64_t>{1});
  CHECK(out.at("er0").tensor().ToFloatVector() == std::vector<float>{3, 4});
  CHECK(out.at("cat").tensor().ToFloatVector() == std::vector<float>{3, 4, 1, 2});
  CHECK(out.at("stk").tensor().shape() == Shape{2, 2});
  CHECK(out.at("stk").tensor().ToFloatVector() == std::vector<float>{3, 1, 4, 2});
  const RuntimeSequence& sc = out.at("sc").elements();
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].tensor().raw_data() == a_bytes);
  const RuntimeSequence& sp = out.at("sp").elements();
  REQUIRE(sp.size() == 2);
  CHECK(sp[0].tensor().shape() == Shape{2, 1});
  CHECK(sp[0].tensor().ToFloatVector() == std::vector<float>{1, 4});
  CHECK(sp[1].tensor().ToFloatVector() == std::vector<float>{2, 3, 5, 6});
  const RuntimeSequence& rows = out.at("rows").elements();
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].tensor().shape() == Shape{3});
  CHECK(rows[1].tensor().raw_data() == m_bytes + 3);  // axis-0 pieces are views
}

TEST_CASE("sequence operators reject bad positions and mixed element types") {
  auto model = ParseModelText(
      "ir_version: 10 opset_import { domain: \"\" version: 18 } graph { "
      "input { name: \"a\" } input { name: \"i\" } input { name: \"pos\" } " +
      Node("SequenceConstruct", {"a"}, "s") + Node("SequenceInsert", {"s", "i"}, "s2") +
      Node("SequenceAt", {"s", "pos"}, "at") + "output { name: \"s2\" } output { name: \"at\" } }");
  RuntimeContext ctx;
  RuntimeSession session(model);
  auto feeds = [](Tensor i, int64_t pos) {
    RuntimeValueMap f;
    f["a"] = RuntimeValue(Floats("a", {1}, {1}));
    f["i"] = RuntimeValue(std::move(i));
    f["pos"] = RuntimeValue(Tensor::FromInt64("pos", {}, {pos}));
    return f;
  };
  CHECK_THROWS_WITH_AS(session.Run(ctx, feeds(Tensor::FromInt64("i", {1}, {1}), 0)),
                       "SequenceInsert node 's2_node': cannot insert a INT64 tensor into a "
                       "sequence of FLOAT",
                       Error);
  CHECK_THROWS_WITH_AS(session.Run(ctx, feeds(Floats("i", {1}, {1}), 1)),
                       "SequenceAt node 'at_node': position 1 is out of range for a sequence of "
                       "length 1",
                       Error);
  auto ok = session.Run(ctx, feeds(Floats("i", {1}, {2}), -1));
  CHECK(ok.at("s2").elements().size() == 2);
  CHECK(ok.at("at").tensor().ToFloatVector() == std::vector<float>{1});
}
