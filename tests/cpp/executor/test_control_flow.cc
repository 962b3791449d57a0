#include <doctest/doctest.h>

#include <string>

#include "executor/runtime_session.h"
#include "test_kernels.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;
using onnx_light::testing::Floats;
using onnx_light::testing::ParseModelText;
using onnx_light::testing::Probe;
using onnx_light::testing::RegisterTestKernels;

namespace {

const std::string kHeader =
    "ir_version: 10 opset_import { domain: \"\" version: 18 } "
    "opset_import { domain: \"test\" version: 1 } ";

std::string Step(const std::string& name, std::vector<std::string> ins, const std::string& out,
                 float add = 1.f) {
  std::string s = "node { name: \"" + name + "\" op_type: \"Step\" domain: \"test\" ";
  for (const auto& i : ins) s += "input: \"" + i + "\" ";
  return s + "output: \"" + out +
         "\" attribute { name: \"add\" type: FLOAT f: " + std::to_string(add) + " } } ";
}

std::string TensorType(int elem, const std::string& dims) {
  return "type { tensor_type { elem_type: " + std::to_string(elem) + " shape { " + dims + " } } }";
}

std::vector<float> Values(const RuntimeValueMap& out, const std::string& name) {
  return out.at(name).tensor().ToFloatVector();
}

}  // namespace

TEST_CASE("If runs the chosen branch, which reads values of the enclosing graph") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model = ParseModelText(kHeader + "graph { input { name: \"c\" } input { name: \"x\" } " +
                              Step("outer", {"x"}, "o") +
                              "node { name: \"if\" op_type: \"If\" input: \"c\" output: \"y\" "
                              "attribute { name: \"then_branch\" type: GRAPH g { name: \"then\" " +
                              Step("t", {"o"}, "ty") +
                              "output { name: \"ty\" } } } "
                              "attribute { name: \"else_branch\" type: GRAPH g { name: \"else\" " +
                              Step("e", {"o", "x"}, "ey", 10) +
                              "output { name: \"ey\" } } } } "
                              "output { name: \"y\" } }");
  RuntimeSession session(model);
  const GraphPlan& plan = session.plan(ctx);
  // The If node reads o and x implicitly, so it runs after `outer` and keeps both alive.
  CHECK(plan.nodes()[1].inputs ==
        std::vector<int>{plan.FindSlot("c"), plan.FindSlot("o"), plan.FindSlot("x")});
  for (bool cond : {true, false}) {
    RuntimeValueMap feeds;
    feeds["c"] = RuntimeValue(Tensor::FromBool("c", {}, {cond}));
    feeds["x"] = RuntimeValue(Floats("x", {2}, {1, 2}));
    auto out = session.Run(ctx, std::move(feeds));
    // then: (x + 1) + 1; else: (x + 1) + x + 10.
    CHECK(Values(out, "y") == (cond ? std::vector<float>{3, 4} : std::vector<float>{13, 15}));
    CHECK(out.at("y").tensor().name() == "y");
  }
  RuntimeValueMap bad;
  bad["c"] = RuntimeValue(Floats("c", {}, {1}));
  bad["x"] = RuntimeValue(Floats("x", {2}, {1, 2}));
  CHECK_THROWS_WITH_AS(session.Run(ctx, std::move(bad)),
                       "If node 'if': cond must be a single BOOL, got FLOAT []", Error);
}

TEST_CASE("Loop carries values, captures outer values and stacks scan outputs") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model = ParseModelText(
      kHeader + "graph { input { name: \"m\" } input { name: \"go\" } input { name: \"x\" } " +
      Step("w", {"x"}, "w") +
      "node { name: \"loop\" op_type: \"Loop\" input: \"m\" input: \"go\" input: \"x\" "
      "output: \"v_final\" output: \"trace\" "
      "attribute { name: \"body\" type: GRAPH g { name: \"body\" "
      "input { name: \"i\" } input { name: \"cond_in\" } input { name: \"v_in\" } "
      "node { name: \"keep\" op_type: \"Identity\" input: \"cond_in\" output: \"cond_out\" } " +
      Step("next", {"v_in", "w"}, "v_out") + Step("copy", {"v_in"}, "s", 0) +
      "output { name: \"cond_out\" } output { name: \"v_out\" } "
      "output { name: \"s\" " +
      TensorType(1, "dim { dim_value: 2 }") +
      " } } } } "
      "output { name: \"v_final\" } output { name: \"trace\" } }");
  RuntimeSession session(model);
  auto run = [&](int64_t m, bool go) {
    RuntimeValueMap feeds;
    feeds["m"] = RuntimeValue(Tensor::FromInt64("m", {}, {m}));
    feeds["go"] = RuntimeValue(Tensor::FromBool("go", {}, {go}));
    feeds["x"] = RuntimeValue(Floats("x", {2}, {0, 1}));
    return session.Run(ctx, std::move(feeds));
  };
  // w = x + 1; each iteration v = v + w + 1.
  auto out = run(3, true);
  CHECK(Values(out, "v_final") == std::vector<float>{6, 10});
  CHECK(out.at("trace").tensor().shape() == Shape{3, 2});
  CHECK(Values(out, "trace") == std::vector<float>{0, 1, 2, 4, 4, 7});
  // No iteration: v_final is x itself and the scan output is empty with the declared dims.
  auto none = run(3, false);
  CHECK(Values(none, "v_final") == std::vector<float>{0, 1});
  CHECK(none.at("trace").tensor().shape() == Shape{0, 2});
  CHECK(none.at("trace").tensor().dtype() == core::DataType::kFloat);
}

TEST_CASE("Scan slices inputs along any axis and direction and stacks outputs likewise") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto scan = [&](const std::string& attrs, const std::string& input) {
    return "node { name: \"scan\" op_type: \"Scan\" input: \"s0\" input: \"" + input +
           "\" output: \"s_final\" output: \"ys\" "
           "attribute { name: \"num_scan_inputs\" type: INT i: 1 } " +
           attrs +
           "attribute { name: \"body\" type: GRAPH g { name: \"body\" "
           "input { name: \"s_in\" } input { name: \"x_t\" } " +
           Step("acc", {"s_in", "x_t", "b"}, "s_out", 0) + Step("y", {"s_out"}, "y_t", 0) +
           "output { name: \"s_out\" } output { name: \"y_t\" } } } } ";
  };
  auto model_for = [&](const std::string& attrs, const std::string& input) {
    return ParseModelText(kHeader +
                          "graph { input { name: \"s0\" } input { name: \"b\" } "
                          "input { name: \"X\" } input { name: \"XT\" } " +
                          scan(attrs, input) +
                          "output { name: \"s_final\" } output { name: \"ys\" } }");
  };
  auto run = [&](const std::shared_ptr<ModelProto>& model) {
    RuntimeSession session(model);
    RuntimeValueMap feeds;
    feeds["s0"] = RuntimeValue(Floats("s0", {2}, {0, 0}));
    feeds["b"] = RuntimeValue(Floats("b", {2}, {10, 10}));
    feeds["X"] = RuntimeValue(Floats("X", {3, 2}, {1, 2, 3, 4, 5, 6}));
    feeds["XT"] = RuntimeValue(Floats("XT", {2, 3}, {1, 3, 5, 2, 4, 6}));
    return session.Run(ctx, std::move(feeds));
  };
  auto forward = run(model_for("", "X"));
  CHECK(Values(forward, "s_final") == std::vector<float>{39, 42});
  CHECK(forward.at("ys").tensor().shape() == Shape{3, 2});
  CHECK(Values(forward, "ys") == std::vector<float>{11, 12, 24, 26, 39, 42});

  auto reversed =
      run(model_for("attribute { name: \"scan_input_directions\" type: INTS ints: 1 } "
                    "attribute { name: \"scan_output_directions\" type: INTS ints: 1 } ",
                    "X"));
  // Rows visited 5 6, 3 4, 1 2; outputs stacked last-iteration first.
  CHECK(Values(reversed, "ys") == std::vector<float>{39, 42, 28, 30, 15, 16});

  auto axis1 =
      run(model_for("attribute { name: \"scan_input_axes\" type: INTS ints: 1 } "
                    "attribute { name: \"scan_output_axes\" type: INTS ints: -1 } ",
                    "XT"));
  CHECK(axis1.at("ys").tensor().shape() == Shape{2, 3});
  CHECK(Values(axis1, "ys") == std::vector<float>{11, 24, 39, 12, 26, 42});
}

TEST_CASE("model-local functions run with resolved attribute references and name their nodes") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model = ParseModelText(
      kHeader +
      "opset_import { domain: \"local\" version: 1 } "
      "functions { name: \"AddBump\" domain: \"local\" input: \"a\" input: \"b\" output: \"r\" "
      "attribute_proto { name: \"bump\" type: FLOAT f: 5 } "
      "opset_import { domain: \"test\" version: 1 } "
      "node { name: \"inner\" op_type: \"Step\" domain: \"test\" input: \"a\" input: \"b\" "
      "output: \"t\" attribute { name: \"add\" type: FLOAT ref_attr_name: \"bump\" } } "
      "node { name: \"twice\" op_type: \"Step\" domain: \"test\" input: \"t\" output: \"r\" "
      "attribute { name: \"add\" type: FLOAT f: 0 } } } "
      "graph { input { name: \"x\" } input { name: \"y\" } "
      "node { name: \"call1\" op_type: \"AddBump\" domain: \"local\" input: \"x\" input: \"y\" "
      "output: \"z1\" attribute { name: \"bump\" type: FLOAT f: 1 } } "
      "node { name: \"call2\" op_type: \"AddBump\" domain: \"local\" input: \"z1\" input: \"y\" "
      "output: \"z2\" } output { name: \"z1\" } output { name: \"z2\" } }");
  RuntimeSession session(model);
  auto feeds = [] {
    RuntimeValueMap f;
    f["x"] = RuntimeValue(Floats("x", {2}, {1, 2}));
    f["y"] = RuntimeValue(Floats("y", {2}, {10, 20}));
    return f;
  };
  auto out = session.Run(ctx, feeds());
  CHECK(Values(out, "z1") == std::vector<float>{12, 23});  // x + y + 1 (the call's bump)
  CHECK(Values(out, "z2") == std::vector<float>{27, 48});  // z1 + y + 5 (the default)
  CHECK(out.at("z2").tensor().name() == "z2");

  probe.fail_node = "inner";
  try {
    session.Run(ctx, feeds());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) == "AddBump node 'call1': Step node 'inner': boom at inner");
  }
}

TEST_CASE("subgraph and function events share the caller's log") {
  Probe probe;
  RuntimeContext ctx(KernelContext(18), RuntimeContextOptions{.events_enabled = true});
  RegisterTestKernels(ctx, probe);
  auto model = ParseModelText(
      kHeader +
      "graph { input { name: \"c\" } input { name: \"x\" } "
      "node { name: \"if\" op_type: \"If\" input: \"c\" output: \"y\" "
      "attribute { name: \"then_branch\" type: GRAPH g { " +
      Step("t", {"x"}, "ty") +
      "output { name: \"ty\" } } } attribute { name: \"else_branch\" type: GRAPH g { " +
      Step("e", {"x"}, "ey") + "output { name: \"ey\" } } } } output { name: \"y\" } }");
  RuntimeSession session(model);
  RuntimeValueMap feeds;
  feeds["c"] = RuntimeValue(Tensor::FromBool("c", {}, {true}));
  feeds["x"] = RuntimeValue(Floats("x", {1}, {1}));
  session.Run(ctx, std::move(feeds));
  auto events = ctx.events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].node_name == "t");
  CHECK(events[0].action == RuntimeEventAction::kKernel);
  CHECK(events[1].action == RuntimeEventAction::kSubgraph);
  CHECK(events[1].node_name == "if");
  CHECK(events[2].node_name == "if");
  CHECK(events[2].action == RuntimeEventAction::kKernel);
}
