// Plan-time merging of duplicate nodes (GraphPlan::MergeDuplicates, with fuse_subgraphs): a
// node that computes what an earlier node computes (same op, attributes and inputs, after
// earlier merges) leaves the plan and its readers read the earlier node's outputs. Results
// equal the unmerged plan's; graph outputs, different attributes and custom domains are
// never merged (random ops neither: executor/graph_plan.cc Deterministic).
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

// Two "layers" that each recompute the same shape arithmetic from x, as torch exports do.
std::shared_ptr<ModelProto> RepeatedShapeModel() {
  return std::make_shared<ModelProto>(core::ParseModel(R"(
    <ir_version: 10, opset_import: ["" : 18]>
    layers (float[N, 6] x) => (float[N, 6] y, int64[2] shape_out, int64[2] shape_out2)
    <int64[1] zero = {0}, int64[1] minus1 = {-1}>
    {
      s1 = Shape(x)
      n1 = Gather <axis = 0> (s1, zero)
      c1 = Concat <axis = 0> (n1, minus1)
      r1 = Reshape(x, c1)
      s2 = Shape(x)
      n2 = Gather <axis = 0> (s2, zero)
      c2 = Concat <axis = 0> (n2, minus1)
      r2 = Reshape(x, c2)
      sum = Add(r1, r2)
      k0 = ReduceSum <keepdims = 0> (sum, zero)
      k1 = ReduceSum <keepdims = 1> (sum, zero)
      b = Add(k0, k1)
      y = Add(sum, b)
      shape_out = Shape(y)
      shape_out2 = Shape(y)
    }
  )"));
}

std::vector<float> Values(const RuntimeValue& v) { return v.tensor().ToFloatVector(); }

}  // namespace

TEST_CASE("duplicate nodes are merged when the plan is built, with unchanged results") {
  auto model = RepeatedShapeModel();
  RuntimeContext context;
  RuntimeSessionOptions plain_options;
  plain_options.fuse_subgraphs = false;
  RuntimeSession merged(model, context), plain(model, context, plain_options);
  const GraphPlan& plan = merged.plan(context);
  // s2, n2, c2 and r2 repeat s1, n1, c1 and r1 (each only once the one before is merged).
  // The ReduceSums differ in an attribute; shape_out2 is a graph output: both stay.
  CHECK(plan.merged_node_count() == 4);
  CHECK(plan.nodes().size() == 15 - 4);
  CHECK(plain.plan(context).merged_node_count() == 0);
  CHECK(plain.plan(context).nodes().size() == 15);
  for (const char* removed : {"s2", "n2", "c2", "r2"})
    for (const auto& node : plan.nodes()) CHECK(node.proto->output(0) != removed);

  for (int64_t rows : {1, 3}) {
    std::vector<float> x(static_cast<size_t>(rows * 6));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 1.0f;
    RuntimeValueMap feeds;
    feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {rows, 6}, x));
    const RuntimeValueMap a = merged.Run(context, RuntimeValueMap(feeds));
    const RuntimeValueMap b = plain.Run(context, std::move(feeds));
    CHECK(Values(a.at("y")) == Values(b.at("y")));
    CHECK(a.at("shape_out").tensor().ToInt64Vector() == std::vector<int64_t>{rows, 6});
    CHECK(a.at("shape_out2").tensor().ToInt64Vector() == std::vector<int64_t>{rows, 6});
  }
}

// test::Count(x) -> x, counting its calls: a user's kernel may have effects, so two
// identical nodes of a custom domain both run.
class CountKernel final : public KernelBase {
 public:
  explicit CountKernel(int& calls) : calls_(calls) {}
  void Compute(KernelCall& call) const override {
    ++calls_;
    call.SetOutputValue(0, call.input_value(0).BorrowView());
  }

 private:
  int& calls_;
};

TEST_CASE("nodes of custom domains are never merged") {
  auto model = std::make_shared<ModelProto>(core::ParseModel(R"(
    <ir_version: 10, opset_import: ["" : 18, "test" : 1]>
    effects (float[4] x) => (float[4] y)
    {
      e1 = test.Count(x)
      e2 = test.Count(x)
      y = Add(e1, e2)
    }
  )"));
  int calls = 0;
  RuntimeContext context;
  context.RegisterKernelFn("test", "Count", core::symbolic::Device::kCPU,
                           [&calls](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                             auto k = std::make_unique<CountKernel>(calls);
                             k->set_node(node);
                             return std::unique_ptr<KernelBase>(std::move(k));
                           });
  RuntimeSession session(model, context);
  CHECK(session.plan(context).merged_node_count() == 0);
  CHECK(session.plan(context).nodes().size() == 3);
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Tensor::FromFloat("x", {4}, {1, 2, 3, 4}));
  session.Run(context, std::move(feeds));
  CHECK(calls == 2);
}
