// paged_cache_initializer defaults: seeding of omitted bound inputs at construction and reset,
// and constant cache values in ordinary sessions.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "state/persistent_value_state.h"
#include "state_kernels.h"
#include "tests/cpp/dense_page.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using namespace state_test;
using test_util::DensePage;

namespace {

// test.AppendPage(cache, k, v) -> next_cache: appends one block holding k and v (each
// [1, 1, n, d]) after the last block. Reads and writes the cache as a RuntimeValue.
class AppendPageKernel final : public KernelBase {
 public:
  void Compute(KernelCall& call) const override {
    const RuntimeValue& cache = call.input_value(0);
    RuntimeSequence blocks = cache.field("blocks").elements();  // shares the tree
    int64_t start = 0;
    if (blocks.size() > 0) {
      const RuntimeValue& last = blocks[blocks.size() - 1];
      start = last.field("start").tensor().data<int64_t>()[0] +
              last.field("length").tensor().data<int64_t>()[0];
    }
    const Tensor& k = call.input(1);
    std::vector<RuntimeValue::Field> block;
    block.emplace_back("start", RuntimeValue(Tensor::FromInt64("start", {}, {start})));
    block.emplace_back("length", RuntimeValue(Tensor::FromInt64("length", {}, {k.dim(2)})));
    block.emplace_back("key", RuntimeValue(k.BorrowView()));
    block.emplace_back("value", RuntimeValue(call.input(2).BorrowView()));
    blocks.PushBack(RuntimeValue::Struct("", std::move(block)));
    std::vector<RuntimeValue::Field> fields;
    fields.emplace_back("blocks", RuntimeValue::Sequence(std::move(blocks)));
    call.SetOutputValue(0, RuntimeValue::Struct("", std::move(fields)));
  }
};

void RegisterAppendPage(RuntimeContext& context) {
  context.RegisterKernelFn("test", "AppendPage", symbolic::Device::kCPU,
                           [](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                             auto k = std::make_unique<AppendPageKernel>();
                             k->set_node(node);
                             return std::unique_ptr<KernelBase>(std::move(k));
                           });
}

void AddTensorInput(GraphProto* g, const std::string& name, int64_t width) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(TensorProto::FLOAT);
  for (int64_t d : {int64_t{1}, int64_t{1}, int64_t{1}, width})
    t->mutable_shape()->add_dim()->set_dim_value(d);
}

// cache (layout-less struct, default: one page of 3 tokens) + k, v -> next_cache.
std::shared_ptr<ModelProto> PagedModel(bool bind, bool cache_is_input = true) {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* test = model->add_opset_import();
  test->set_domain("test");
  test->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("paged");
  if (cache_is_input) {
    auto* in = g->add_input();
    in->set_name("cache");
    in->mutable_type()->mutable_struct_type()->set_name("cache");
  }
  AddTensorInput(g, "k", 2);
  AddTensorInput(g, "v", 3);
  auto* out = g->add_output();
  out->set_name("next_cache");
  out->mutable_type()->mutable_struct_type()->set_name("cache");
  auto* node = g->add_node();
  node->set_op_type("AppendPage");
  node->set_domain("test");
  node->add_input("cache");
  node->add_input("k");
  node->add_input("v");
  node->add_output("next_cache");
  auto* cache = g->add_paged_cache_initializer();
  cache->set_name("cache");
  auto* b = cache->add_blocks();
  b->set_start(0);
  b->set_length(3);
  DensePage(b->mutable_key(), 4, 2, 0);
  DensePage(b->mutable_value(), 4, 3, 100);
  if (bind) Bind(*model, "cache", "next_cache");
  return model;
}

RuntimeValueMap Feeds(float k, float v) {
  RuntimeValueMap feeds;
  feeds["k"] = RuntimeValue(Tensor::FromFloat("k", {1, 1, 1, 2}, {k, k}));
  feeds["v"] = RuntimeValue(Tensor::FromFloat("v", {1, 1, 1, 3}, {v, v, v}));
  return feeds;
}

const RuntimeSequence& Blocks(const RuntimeValue& cache) {
  return cache.field("blocks").elements();
}

}  // namespace

TEST_CASE("An omitted bound input is seeded from its paged_cache_initializer without a copy") {
  auto model = PagedModel(true);
  const void* default_key =
      model->graph().paged_cache_initializer(0).blocks(0).key().raw_data().data();
  PersistentValueState state(model, {});
  RuntimeValue seeded = state.Values().at("cache");
  REQUIRE(Blocks(seeded).size() == 1);
  CHECK(Blocks(seeded)[0].field("key").tensor().raw_data() == default_key);

  RuntimeContext context;
  RegisterAppendPage(context);
  state.Run(context, Feeds(7, 8));
  state.Run(context, Feeds(9, 10));
  RuntimeValue grown = state.Values().at("cache");
  REQUIRE(Blocks(grown).size() == 3);
  CHECK(Blocks(grown)[0].field("key").tensor().raw_data() == default_key);  // prefix shared
  CHECK(Blocks(grown)[2].field("start").tensor().data<int64_t>()[0] == 4);
  CHECK(Blocks(grown)[2].field("key").tensor().ToFloatVector() == std::vector<float>{9, 9});

  // Reset without the input seeds the default again; the grown snapshot stays readable.
  state.Reset({});
  CHECK(Blocks(state.Values().at("cache")).size() == 1);
  CHECK(Blocks(grown).size() == 3);
}

TEST_CASE("An explicit initial value overrides the paged_cache_initializer") {
  auto model = PagedModel(true);
  auto empty = std::make_shared<PagedCacheProto>();
  RuntimeValueMap initial;
  initial["cache"] = RuntimeValue::FromPagedCache(empty);
  PersistentValueState state(model, std::move(initial));
  CHECK(Blocks(state.Values().at("cache")).size() == 0);
  RuntimeContext context;
  RegisterAppendPage(context);
  state.Run(context, Feeds(1, 2));
  CHECK(Blocks(state.Values().at("cache"))[0].field("start").tensor().data<int64_t>()[0] == 0);
}

TEST_CASE("An invalid paged_cache_initializer fails construction, naming the input") {
  auto model = PagedModel(true);
  model->mutable_graph()->mutable_paged_cache_initializer(0)->mutable_blocks(0)->set_start(2);
  try {
    PersistentValueState state(model, {});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("'cache.blocks[0]'") != std::string::npos);
    CHECK(std::string(e.what()).find("contiguous") != std::string::npos);
  }
}

TEST_CASE("A session seeds paged_cache_initializer as a default input and as a constant") {
  RuntimeContext context;
  RegisterAppendPage(context);
  for (bool is_input : {true, false}) {
    CAPTURE(is_input);
    auto model = PagedModel(false, is_input);
    RuntimeSession session(*model);
    RuntimeValueMap out = session.Run(context, Feeds(5, 6));
    const RuntimeSequence& blocks = Blocks(out.at("next_cache"));
    REQUIRE(blocks.size() == 2);
    CHECK(blocks[0].field("length").tensor().data<int64_t>()[0] == 3);
    CHECK(blocks[1].field("start").tensor().data<int64_t>()[0] == 3);
  }
  // A caller's feed overrides the default for that invocation.
  auto model = PagedModel(false, true);
  RuntimeSession session(*model);
  RuntimeValueMap feeds = Feeds(5, 6);
  feeds["cache"] = RuntimeValue::FromPagedCache(std::make_shared<PagedCacheProto>());
  CHECK(Blocks(session.Run(context, std::move(feeds)).at("next_cache")).size() == 1);
}
