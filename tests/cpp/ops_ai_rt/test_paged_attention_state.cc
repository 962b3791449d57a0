// PagedAttention in a model with past <- present bound (spec "Kernel implementation"): the
// spec's registration code as written, the built-in kernel, zero-copy retention of pages.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "executor/runtime_context.h"
#include "ops/ai_rt/paged_attention.h"
#include "paged_fixtures.h"
#include "state/persistent_value_state.h"

using namespace paged_test;

namespace {

void AddInput(GraphProto* g, const std::string& name, int64_t heads, int64_t width) {
  auto* t = g->add_input();
  t->set_name(name);
  auto* tt = t->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(1);
  tt->mutable_shape()->add_dim()->set_dim_value(heads);
  tt->mutable_shape()->add_dim()->set_dim_param("new_tokens");  // symbolic
  tt->mutable_shape()->add_dim()->set_dim_value(width);
}

// q [1, 4, n, 8], k/v [1, 2, n, 8], past (layout-less struct) -> y, present; past <- present.
std::shared_ptr<ModelProto> PagedModel() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* rt = model->add_opset_import();
  rt->set_domain("ai.rt");
  rt->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("paged");
  AddInput(g, "q", 4, 8);
  AddInput(g, "k", 2, 8);
  AddInput(g, "v", 2, 8);
  g->add_input()->set_name("past");
  g->mutable_input(3)->mutable_type()->mutable_struct_type();
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  auto* present = g->add_output();
  present->set_name("present");
  present->mutable_type()->mutable_struct_type();
  auto* node = g->add_node();
  node->set_op_type("PagedAttention");
  node->set_domain("ai.rt");
  node->set_name("attention");
  for (const char* in : {"q", "k", "v", "past"}) node->add_input(in);
  node->add_output("y");
  node->add_output("present");
  auto* bind = g->add_persistent_bindings();
  bind->set_input_name("past");
  bind->set_output_name("present");
  return model;
}

RuntimeValueMap Feeds(int64_t len, uint32_t seed) {
  RuntimeValueMap feeds;
  feeds["q"] = RuntimeValue(Floats("q", {1, 4, len, 8}, [&](int64_t i) { return Noise(seed, i); }));
  feeds["k"] =
      RuntimeValue(Floats("k", {1, 2, len, 8}, [&](int64_t i) { return Noise(seed + 1, i); }));
  feeds["v"] =
      RuntimeValue(Floats("v", {1, 2, len, 8}, [&](int64_t i) { return Noise(seed + 2, i); }));
  return feeds;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

void RegisterAsTheSpecWrites(RuntimeContext& context) {
  using namespace onnx_light;
  using namespace onnx_light::core::runtime;

  context.RegisterKernelFn(
      "ai.rt", "PagedAttention", core::symbolic::Device::kCPU,
      [](const NodeProto& node, RuntimeContext& rt) -> std::unique_ptr<KernelBase> {
        auto kernel = std::make_unique<onnx_kernels::kernel::PagedAttention>(rt.kernel_ctx());
        kernel->set_node(node);
        return kernel;
      });
}

}  // namespace

TEST_CASE(
    "The spec's registration, the built-in kernel and direct calls decode alike, and the "
    "state retains every page without a copy") {
  using onnx_light::onnx_kernels::kernel::PagedAttention;
  auto model = PagedModel();
  RuntimeContext registered;
  RegisterAsTheSpecWrites(registered);
  RuntimeContext builtin;
  RuntimeValueMap initial;
  initial["past"] = PagedAttention::EmptyCache();
  PersistentValueState a(model, initial), b(model, initial);

  KernelContext ctx;
  PagedAttention direct(ctx);
  direct.set_node(model->graph().node(0));
  RuntimeValue cache = PagedAttention::EmptyCache();
  std::vector<const void*> pages;
  for (int step = 0; step < 5; ++step) {
    const int64_t len = step == 0 ? 7 : 1;
    const RuntimeValueMap feeds = Feeds(len, static_cast<uint32_t>(10 * step + 1));
    auto ya = a.Run(registered, feeds).at("y").tensor().ToFloatVector();
    auto yb = b.Run(builtin, feeds).at("y").tensor().ToFloatVector();
    auto r =
        direct.Run(feeds.at("q").tensor(), feeds.at("k").tensor(), feeds.at("v").tensor(), cache);
    cache = r.present;
    CHECK(MaxDiff(ya, r.y.ToFloatVector()) < 1e-5f);  // pages split differently
    CHECK(yb == ya);
    // The state alone holds its cache: the prompt's page (16 rows of capacity) takes the
    // next tokens in place, so the retained page is the same storage after every step.
    const RuntimeValue retained = a.Values().at("past");
    const RuntimeSequence& blocks = retained.field("blocks").elements();
    REQUIRE(blocks.size() == 1);
    CHECK(blocks[0].field("length").tensor().data<int64_t>()[0] == 7 + step);
    pages.push_back(blocks[0].field("key").tensor().raw_data());
    CHECK(pages.back() == pages.front());
    // The direct calls (no state) seal every page instead.
    CHECK(r.present.field("blocks").elements().size() == static_cast<size_t>(step + 1));
  }
}

TEST_CASE(
    "Steady decoding fills the exclusively held last page in place: 1,024 steps make 64 "
    "pages, with a live view each step they make 1,024, and the view never changes") {
  using onnx_light::onnx_kernels::kernel::PagedAttention;
  auto model = PagedModel();
  RuntimeContext context;
  RuntimeValueMap initial;
  initial["past"] = PagedAttention::EmptyCache();
  PersistentValueState alone(model, initial), watched(model, initial);
  std::vector<RuntimeValue> views;
  std::vector<std::vector<float>> first_view_keys;
  for (int step = 0; step < 1024; ++step) {
    const RuntimeValueMap feeds = Feeds(1, static_cast<uint32_t>(step));
    const auto ya = alone.Run(context, feeds).at("y").tensor().ToFloatVector();
    const auto yb = watched.Run(context, feeds).at("y").tensor().ToFloatVector();
    CHECK(MaxDiff(ya, yb) < 1e-5f);  // the same attention, summed in other page blocks
    views.push_back(watched.Values().at("past"));
    if (step == 0)
      first_view_keys.push_back(
          views[0].field("blocks").elements()[0].field("key").tensor().ToFloatVector());
  }
  const auto pages = [](const RuntimeValue& cache) {
    return cache.field("blocks").elements().size();
  };
  CHECK(pages(alone.Values().at("past")) == 64);
  CHECK(pages(watched.Values().at("past")) == 1024);
  // The first view still sees one token, with the same bytes.
  CHECK(pages(views[0]) == 1);
  CHECK(views[0].field("blocks").elements()[0].field("key").tensor().ToFloatVector() ==
        first_view_keys[0]);
}

TEST_CASE(
    "Memory held per sequence in steady decoding is the logical bytes plus less than one "
    "page: 1,000 tokens in 63 pages of 16 rows") {
  using onnx_light::onnx_kernels::kernel::PagedAttention;
  auto model = PagedModel();
  RuntimeContext context;
  RuntimeValueMap initial;
  initial["past"] = PagedAttention::EmptyCache();
  PersistentValueState state(model, initial);
  constexpr int kSteps = 1000;
  for (int step = 0; step < kSteps; ++step)
    state.Run(context, Feeds(1, static_cast<uint32_t>(step)));
  const auto& blocks = state.Values().at("past").field("blocks").elements();
  size_t payload = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const RuntimeValue& block = blocks[i];
    payload += block.field("key").tensor().nbytes() + block.field("value").tensor().nbytes();
    tokens += *block.field("length").tensor().data<int64_t>();
  }
  // K and V rows of 2 heads x 8 FLOAT each: 128 bytes per token.
  constexpr size_t kTokenBytes = 2 * (2 * 8 * 4);
  CHECK(tokens == kSteps);
  CHECK(blocks.size() == 63);
  CHECK(payload <= (kSteps + 16 - 1) * kTokenBytes);
  CHECK(payload == 63 * 16 * kTokenBytes);
}
