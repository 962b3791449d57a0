// Plan-time constant folding (GraphPlan::Build): nodes whose inputs are all constants run
// once when the plan is built and leave the plan; results equal the unfolded plan's; a node
// that reads a graph input (or an initializer that is also a graph input) is never folded;
// a Transpose of a weight read only as MatMul's B folds to a view of the weight's bytes.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "executor/graph_plan.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

// The LM-head shape of a tied-embedding decoder: logits = MatMul(x, Transpose(E)), plus a
// chain of constant-only nodes (Mul, Add of initializers) feeding an Add with x.
std::shared_ptr<ModelProto> TiedHeadModel() {
  return std::make_shared<ModelProto>(core::ParseModel(R"(
    <ir_version: 10, opset_import: ["" : 18]>
    head (float[1, 3] x) => (float[1, 4] logits, float[1, 3] shifted)
    <float[4, 3] E = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, float[3] a = {1, 2, 3},
     float[3] b = {0.5, 0.25, 0.125}>
    {
      Et = Transpose <perm = [1, 0]> (E)
      logits = MatMul(x, Et)
      ab = Mul(a, b)
      ab2 = Add(ab, b)
      shifted = Add(x, ab2)
    }
  )"));
}

RuntimeValueMap Run(RuntimeSession& session, RuntimeContext& context, const std::vector<float>& x) {
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {1, 3}, x));
  return session.Run(context, std::move(feeds));
}

std::vector<float> Values(const RuntimeValue& v) { return v.tensor().ToFloatVector(); }

}  // namespace

TEST_CASE("constant-only nodes are folded when the plan is built, with unchanged results") {
  auto model = TiedHeadModel();
  RuntimeContext context;
  RuntimeSessionOptions unfolded_options;
  unfolded_options.fold_constants = false;
  RuntimeSession folded(model, context), unfolded(model, context, unfolded_options);
  const GraphPlan& plan = folded.plan(context);
  // Transpose, Mul and the first Add leave the plan; MatMul and the Add of x stay.
  CHECK(plan.folded_node_count() == 3);
  REQUIRE(plan.nodes().size() == 2);
  CHECK(plan.nodes()[0].proto->op_type() == "MatMul");
  CHECK(plan.nodes()[1].proto->op_type() == "Add");
  CHECK(unfolded.plan(context).folded_node_count() == 0);
  CHECK(unfolded.plan(context).nodes().size() == 5);
  // The transposed weight is a view of E's bytes: nothing was copied for it.
  const int et = plan.FindSlot("Et");
  REQUIRE(plan.is_constant(et));
  const Tensor& view = plan.constant(et)->tensor();
  CHECK_FALSE(view.contiguous());
  CHECK(view.shape() == Shape{3, 4});
  const int e = plan.FindSlot("E");
  CHECK(view.strided_data() == plan.constant(e)->tensor().strided_data());
  // Only Mul and Add allocated: 3 floats each.
  CHECK(plan.folded_bytes() == 2 * 3 * sizeof(float));

  for (const std::vector<float>& x : {std::vector<float>{1, 0, 0}, {0.5f, -2, 3}}) {
    for (int call = 0; call < 3; ++call) {  // unpacked, packing, packed calls
      const RuntimeValueMap a = Run(folded, context, x), b = Run(unfolded, context, x);
      CHECK(Values(a.at("logits")) == Values(b.at("logits")));
      CHECK(Values(a.at("shifted")) == Values(b.at("shifted")));
    }
  }
  const RuntimeValueMap out = Run(folded, context, {1, 0, 0});
  CHECK(Values(out.at("logits")) == std::vector<float>{1, 4, 7, 10});
  CHECK(Values(out.at("shifted")) == std::vector<float>{2.0f, 0.75f, 0.5f});
}

TEST_CASE("a node that reads a graph input is never folded, even one with a default") {
  // `b` has an initializer but is a graph input: a caller may feed it, so Mul(a, b) and
  // everything after it must run on every call.
  auto model = std::make_shared<ModelProto>(core::ParseModel(R"(
    <ir_version: 10, opset_import: ["" : 18]>
    g (float[3] x, float[3] b) => (float[3] y)
    <float[3] a = {1, 2, 3}, float[3] b = {1, 1, 1}>
    {
      ab = Mul(a, b)
      y = Add(x, ab)
    }
  )"));
  RuntimeContext context;
  RuntimeSession session(model, context);
  CHECK(session.plan(context).folded_node_count() == 0);
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {3}, {0, 0, 0}));
  feeds["b"] = RuntimeValue(Tensor::FromFloat("b", {3}, {2, 2, 2}));
  CHECK(Values(session.Run(context, std::move(feeds)).at("y")) == std::vector<float>{2, 4, 6});
  RuntimeValueMap defaults;
  defaults["x"] = RuntimeValue(Tensor::FromFloat("x", {3}, {0, 0, 0}));
  CHECK(Values(session.Run(context, std::move(defaults)).at("y")) == std::vector<float>{1, 2, 3});
}

TEST_CASE("a constant-only node whose result is a graph output or fails stays in the plan") {
  // `c` is a graph output: it keeps being computed per call. `bad` fails (shapes do not
  // broadcast): folding leaves it in place, so the error reaches the caller at run time.
  auto model = std::make_shared<ModelProto>(core::ParseModel(R"(
    <ir_version: 10, opset_import: ["" : 18]>
    g (float[2] x) => (float[2] c, float[2] y)
    <float[2] a = {1, 2}, float[3] w = {1, 2, 3}>
    {
      c = Neg(a)
      bad = Add(a, w)
      y = Add(x, bad)
    }
  )"));
  RuntimeContext context;
  RuntimeSession session(model, context);
  const GraphPlan& plan = session.plan(context);
  CHECK(plan.folded_node_count() == 0);
  CHECK(plan.nodes().size() == 3);
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {2}, {0, 0}));
  CHECK_THROWS_WITH(session.Run(context, std::move(feeds)), doctest::Contains("Add node"));
}
