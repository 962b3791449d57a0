#include <doctest/doctest.h>

#include <atomic>
#include <string>

#include "executor/graph_plan.h"
#include "executor/runtime_session.h"
#include "test_kernels.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;
using onnx_light::testing::CountingAllocator;
using onnx_light::testing::Floats;
using onnx_light::testing::ParseModelText;
using onnx_light::testing::Probe;
using onnx_light::testing::RegisterTestKernels;
using Mode = RuntimeSessionOptions::ExecutorMode;

namespace {

const char* kFloat4 = "type { tensor_type { elem_type: 1 shape { dim { dim_value: 4 } } } }";

std::string Header() {
  return "ir_version: 10 opset_import { domain: \"\" version: 18 } "
         "opset_import { domain: \"test\" version: 1 } ";
}

std::string StepNode(const std::string& name, const std::string& in, const std::string& out,
                     const std::string& in2 = "") {
  return "node { name: \"" + name + "\" op_type: \"Step\" domain: \"test\" input: \"" + in + "\"" +
         (in2.empty() ? "" : " input: \"" + in2 + "\"") + " output: \"" + out + "\" } ";
}

// x -> n0 -> t0 -> n1 -> t1 ... -> n{k-1} -> y
std::shared_ptr<ModelProto> ChainModel(int k) {
  std::string g = "graph { name: \"chain\" input { name: \"x\" " + std::string(kFloat4) + " } ";
  for (int i = 0; i < k; ++i)
    g += StepNode("n" + std::to_string(i), i == 0 ? "x" : "t" + std::to_string(i - 1),
                  i == k - 1 ? "y" : "t" + std::to_string(i));
  g += "output { name: \"y\" } }";
  return ParseModelText(Header() + g);
}

// x feeds `width` chains of length 2, summed pairwise into y.
std::shared_ptr<ModelProto> WideModel(int width) {
  std::string g = "graph { name: \"wide\" input { name: \"x\" " + std::string(kFloat4) + " } ";
  std::vector<std::string> level;
  for (int i = 0; i < width; ++i) {
    std::string a = "a" + std::to_string(i), b = "b" + std::to_string(i);
    g += StepNode("na" + std::to_string(i), "x", a);
    g += StepNode("nb" + std::to_string(i), a, b);
    level.push_back(b);
  }
  int id = 0;
  while (level.size() > 1) {
    std::vector<std::string> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      std::string s = level.size() == 2 ? "y" : "s" + std::to_string(id);
      g += StepNode("sum" + std::to_string(id++), level[i], s, level[i + 1]);
      next.push_back(s);
    }
    if (level.size() % 2) next.push_back(level.back());
    level = next;
  }
  g += "output { name: \"y\" } }";
  return ParseModelText(Header() + g);
}

RuntimeValueMap Feed(std::vector<float> v) {
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Floats("x", {4}, std::move(v)));
  return feeds;
}

}  // namespace

TEST_CASE("a plan gives every value a slot and releases intermediates after their last reader") {
  Probe probe;
  CountingAllocator allocator;
  probe.allocator = &allocator;
  RuntimeContext ctx;
  ctx.set_allocator(allocator);
  RegisterTestKernels(ctx, probe);
  auto model = ChainModel(4);
  RuntimeSession session(model, {.intra_op_threads = 1});
  const GraphPlan& plan = session.plan(ctx);
  CHECK(plan.slot_count() == 5);  // x, t0, t1, t2, y
  CHECK(plan.FindSlot("x") == 0);
  CHECK(plan.inputs().size() == 1);
  REQUIRE(plan.nodes().size() == 4);
  CHECK(plan.width() == 1);
  CHECK(session.executor_for(plan) == Mode::kInline);
  // t0 is read only by n1, so n1 releases it; y (a graph output) is never released.
  CHECK(plan.nodes()[1].release == std::vector<int>{plan.FindSlot("t0")});
  CHECK(plan.nodes()[3].release == std::vector<int>{plan.FindSlot("t2")});

  auto out = session.Run(ctx, Feed({1, 2, 3, 4}));
  CHECK(out.at("y").tensor().ToFloatVector() == std::vector<float>{5, 6, 7, 8});
  // Each node starts with only its own input alive: 16 bytes (4 floats), never two.
  CHECK(probe.live_at_start == std::vector<size_t>{0, 16, 16, 16});
  CHECK(allocator.live() == 16);  // only the returned output
  out.clear();
  CHECK(allocator.live() == 0);
}

TEST_CASE("nodes given out of order are sorted, and cycles and undefined names are rejected") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model =
      ParseModelText(Header() + "graph { input { name: \"x\" } " + StepNode("second", "t", "y") +
                     StepNode("first", "x", "t") + "output { name: \"y\" } }");
  RuntimeSession session(model);
  auto out = session.Run(ctx, Feed({0, 0, 0, 0}));
  CHECK(out.at("y").tensor().ToFloatVector() == std::vector<float>{2, 2, 2, 2});
  CHECK(probe.order == std::vector<std::string>{"first", "second"});

  auto cyclic =
      ParseModelText(Header() + "graph { input { name: \"x\" } " + StepNode("p", "x", "a", "b") +
                     StepNode("q", "a", "b") + "output { name: \"b\" } }");
  RuntimeSession bad(cyclic);
  CHECK_THROWS_WITH_AS(bad.Run(ctx, Feed({0, 0, 0, 0})),
                       doctest::Contains("the nodes form a cycle through Step node 'p'"), Error);
  auto undefined = ParseModelText(Header() + "graph { input { name: \"x\" } " +
                                  StepNode("p", "nowhere", "y") + "output { name: \"y\" } }");
  RuntimeSession bad2(undefined);
  CHECK_THROWS_WITH_AS(bad2.Run(ctx, Feed({0, 0, 0, 0})),
                       "graph: Step node 'p' reads 'nowhere', which no node, graph input or "
                       "initializer defines",
                       Error);
}

TEST_CASE("standard nodes with too few inputs or a stray graph attribute are refused") {
  // Both from tests/fuzz/fuzz_models.py (an If mutated into Add/OneHot): the branches'
  // captures became inputs of the node, and a kernel read a missing input's name.
  auto one_input = ParseModelText(Header() +
                                  "graph { input { name: \"x\" } node { name: \"lonely\" "
                                  "op_type: \"Add\" input: \"x\" output: \"y\" } "
                                  "output { name: \"y\" } }");
  CHECK_THROWS_WITH_AS(RuntimeSession{one_input},
                       "Add node 'lonely': has 1 inputs, but Add-14 takes at least 2", Error);
  auto branch = ParseModelText(
      Header() +
      "graph { input { name: \"x\" } node { name: \"add\" op_type: \"Add\" input: \"x\" "
      "input: \"x\" output: \"y\" attribute { name: \"then_branch\" type: GRAPH g { "
      "node { op_type: \"Identity\" input: \"x\" output: \"z\" } output { name: \"z\" } "
      "} } } output { name: \"y\" } }");
  CHECK_THROWS_WITH_AS(RuntimeSession{branch},
                       "Add node 'add': attribute 'then_branch' is a graph, which Add does not "
                       "take",
                       Error);
}

TEST_CASE("a node without a kernel is reported with its domain, opset and name") {
  RuntimeContext ctx;
  auto model =
      ParseModelText(Header() +
                     "graph { input { name: \"x\" } node { name: \"mystery\" op_type: \"NoSuchOp\" "
                     "input: \"x\" output: \"y\" } output { name: \"y\" } }");
  RuntimeSession session(model);
  try {
    session.Run(ctx, Feed({0, 0, 0, 0}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) ==
          "no kernel for ai.onnx::NoSuchOp (opset 18) needed by node 'mystery'");
  }
}

TEST_CASE("feeds are validated: unknown names, missing inputs, dtype, rank and fixed dims") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model = ParseModelText(
      Header() +
      "graph { input { name: \"x\" type { tensor_type { elem_type: 1 shape { dim { dim_param: "
      "\"n\" } dim { dim_value: 2 } } } } } input { name: \"bias\" " +
      kFloat4 + " } " +
      "initializer { name: \"bias\" data_type: 1 dims: 4 float_data: [10, 20, 30, 40] } " +
      StepNode("n", "x", "y") + "output { name: \"y\" } output { name: \"bias\" } }");
  RuntimeSession session(model);
  auto run = [&](RuntimeValueMap feeds) { return session.Run(ctx, std::move(feeds)); };
  RuntimeValueMap unknown;
  unknown["x"] = RuntimeValue(Floats("x", {1, 2}, {1, 2}));
  unknown["zz"] = RuntimeValue(Floats("zz", {1}, {1}));
  unknown["aa"] = RuntimeValue(Floats("aa", {1}, {1}));
  CHECK_THROWS_WITH_AS(run(unknown),
                       "unknown feed name(s) 'aa', 'zz'; the graph inputs are 'x', 'bias'", Error);
  CHECK_THROWS_WITH_AS(run({}), "missing required input 'x'", Error);
  RuntimeValueMap wrong_dtype;
  wrong_dtype["x"] = RuntimeValue(Tensor::FromInt64("x", {1, 2}, {1, 2}));
  CHECK_THROWS_WITH_AS(run(wrong_dtype), "input 'x': expected dtype FLOAT, got INT64", Error);
  RuntimeValueMap wrong_rank;
  wrong_rank["x"] = RuntimeValue(Floats("x", {2}, {1, 2}));
  CHECK_THROWS_WITH_AS(run(wrong_rank), "input 'x': expected rank 2, got shape [2]", Error);
  RuntimeValueMap wrong_dim;
  wrong_dim["x"] = RuntimeValue(Floats("x", {2, 1}, {1, 2}));
  CHECK_THROWS_WITH_AS(run(wrong_dim), "input 'x': dimension 1 must be 2, got shape [2, 1]", Error);

  // The symbolic dimension accepts any size; the defaulted input may be omitted.
  RuntimeValueMap ok;
  ok["x"] = RuntimeValue(Floats("x", {3, 2}, {0, 1, 2, 3, 4, 5}));
  auto out = run(std::move(ok));
  CHECK(out.at("y").tensor().ToFloatVector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(out.at("bias").tensor().ToFloatVector() == std::vector<float>{10, 20, 30, 40});
  // A supplied feed overrides the initializer default.
  RuntimeValueMap both;
  both["x"] = RuntimeValue(Floats("x", {1, 2}, {0, 0}));
  both["bias"] = RuntimeValue(Floats("bias", {4}, {1, 1, 1, 1}));
  CHECK(run(std::move(both)).at("bias").tensor().ToFloatVector() == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("outputs are moved out of the frame and initializers are model-backed views") {
  RuntimeContext ctx;
  auto model =
      ParseModelText(Header() +
                     "graph { input { name: \"x\" } initializer { name: \"w\" data_type: 1 dims: 2 "
                     "raw_data: \"\\000\\000\\200\\077\\000\\000\\000\\100\" } "
                     "node { name: \"id\" op_type: \"Identity\" input: \"x\" output: \"y\" } "
                     "output { name: \"y\" } output { name: \"w\" } output { name: \"x\" } }");
  RuntimeSession session(model);
  Tensor x = Floats("x", {2}, {7, 8});
  const void* x_data = x.raw_data();
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(std::move(x));
  auto out = session.Run(ctx, std::move(feeds));
  CHECK(out.at("y").tensor().raw_data() == x_data);
  CHECK(out.at("x").tensor().raw_data() == x_data);
  const Tensor& w = out.at("w").tensor();
  CHECK(w.ToFloatVector() == std::vector<float>{1, 2});
  CHECK(w.raw_data() == model->graph().initializer(0).raw_data().data());
  // The view keeps the model alive: every copy of it holds a reference to the model.
  long before = model.use_count();
  Tensor keep = w;
  CHECK(model.use_count() == before + 1);
}

TEST_CASE("inline and flow-graph executors compute the same results on a wide graph") {
  Probe probe;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  auto model = WideModel(16);
  RuntimeSession inline_session(model, {.intra_op_threads = 2, .executor = Mode::kInline});
  RuntimeSession flow_session(model, {.intra_op_threads = 2, .executor = Mode::kFlowGraph});
  RuntimeSession auto_session(model, {.intra_op_threads = 2});
  const GraphPlan& plan = auto_session.plan(ctx);
  CHECK(plan.width() == 16);
  CHECK(plan.nodes().size() == 47);
  CHECK(auto_session.executor_for(plan) == Mode::kFlowGraph);
  for (int run = 0; run < 3; ++run) {  // the flow graph is reused across runs
    auto a = inline_session.Run(ctx, Feed({1, 2, 3, 4}));
    auto b = flow_session.Run(ctx, Feed({1, 2, 3, 4}));
    // Each chain adds 2 to x; each of the 15 sums adds its two inputs plus 1.
    std::vector<float> expected;
    for (float v : {1.f, 2.f, 3.f, 4.f}) expected.push_back(16 * (v + 2) + 15);
    CHECK(a.at("y").tensor().ToFloatVector() == expected);
    CHECK(b.at("y").tensor().ToFloatVector() == expected);
  }
  CHECK(probe.executed.load() == 6 * 47);
}

TEST_CASE("a failing node names itself, keeps its code and cancels every later node") {
  for (Mode mode : {Mode::kInline, Mode::kFlowGraph}) {
    for (int position = 0; position < 6; ++position) {
      Probe probe;
      probe.fail_node = "n" + std::to_string(position);
      RuntimeContext ctx;
      RegisterTestKernels(ctx, probe);
      RuntimeSession session(ChainModel(6), {.intra_op_threads = 2, .executor = mode});
      try {
        session.Run(ctx, Feed({0, 0, 0, 0}));
        FAIL("expected an error");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::kNotImplemented);
        CHECK(std::string(e.what()) ==
              "Step node '" + probe.fail_node + "': boom at " + probe.fail_node);
      }
      CHECK(probe.executed.load() == position + 1);
      // The session stays usable after a failure (the flow graph is reset).
      probe.fail_node.clear();
      auto out = session.Run(ctx, Feed({0, 0, 0, 0}));
      CHECK(out.at("y").tensor().ToFloatVector() == std::vector<float>{6, 6, 6, 6});
    }
  }
}

TEST_CASE("a failure in a wide flow graph reaches the caller and its dependants never run") {
  Probe probe;
  probe.fail_node = "na0";
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  RuntimeSession session(WideModel(16), {.intra_op_threads = 2, .executor = Mode::kFlowGraph});
  CHECK_THROWS_WITH_AS(session.Run(ctx, Feed({0, 0, 0, 0})), "Step node 'na0': boom at na0", Error);
  // nb0 and the sums on chain 0's path (sum0, sum8, sum12, sum14) depend on the failed node.
  for (const auto& name : probe.order)
    for (const char* dependant : {"nb0", "sum0", "sum8", "sum12", "sum14"})
      CHECK(name != dependant);
  CHECK(probe.executed.load() <= 47 - 5);
}

TEST_CASE("a cancellation flag stops the run between nodes with kCancelled") {
  for (Mode mode : {Mode::kInline, Mode::kFlowGraph}) {
    Probe probe;
    std::atomic<bool> cancel{false};
    probe.cancel_on_run = &cancel;
    probe.cancel_node = "n2";
    RuntimeContext ctx;
    RegisterTestKernels(ctx, probe);
    RuntimeSession session(ChainModel(6), {.intra_op_threads = 2, .executor = mode});
    try {
      session.Run(ctx, Feed({0, 0, 0, 0}), RunOptions{&cancel});
      FAIL("expected cancellation");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kCancelled);
      CHECK(std::string(e.what()) == "run cancelled before Step node 'n3'");
    }
    CHECK(probe.executed.load() == 3);
  }
}
