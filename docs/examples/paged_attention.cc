// Paged KV decode with ai.rt::PagedAttention (docs/paged-cache.md): a one-node model whose
// past <- present binding keeps the cache, the kernel registered as the spec writes it with
// a format selector, and the statistics of a direct call. Exits 1 if anything disagrees.
#include "ops/ai_rt/paged_attention.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "executor/runtime_context.h"
#include "state/persistent_value_state.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

void AddInput(GraphProto* g, const char* name, int64_t heads) {
  auto* t = g->add_input();
  t->set_name(name);
  auto* shape = t->mutable_type()->mutable_tensor_type();
  shape->set_elem_type(TensorProto::FLOAT);
  for (int64_t d : {int64_t{1}, heads, int64_t{1}, int64_t{64}})
    shape->mutable_shape()->add_dim()->set_dim_value(d);
}

std::shared_ptr<ModelProto> Model() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* rt = model->add_opset_import();
  rt->set_domain("ai.rt");
  rt->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("decode");
  AddInput(g, "q", 8);
  AddInput(g, "k", 2);
  AddInput(g, "v", 2);
  g->add_input()->set_name("past");
  g->mutable_input(3)->mutable_type()->mutable_struct_type();
  g->add_output()->set_name("y");
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  g->add_output()->set_name("present");
  g->mutable_output(1)->mutable_type()->mutable_struct_type();
  auto* node = g->add_node();
  node->set_op_type("PagedAttention");
  node->set_domain("ai.rt");
  for (const char* in : {"q", "k", "v", "past"}) node->add_input(in);
  node->add_output("y");
  node->add_output("present");
  auto* bind = g->add_persistent_bindings();
  bind->set_input_name("past");
  bind->set_output_name("present");
  return model;
}

Tensor Filled(const char* name, Shape shape, float base) {
  std::vector<float> v(static_cast<size_t>(ShapeNumel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.01f * static_cast<float>(i % 17);
  return Tensor::FromFloat(name, std::move(shape), std::move(v));
}

}  // namespace

int main() {
  // INT8 keys and UINT4 values once 4 tokens are retained; dense FLOAT before.
  auto select_formats = [](const Tensor&, const Tensor&, int64_t past_length) {
    if (past_length < 4) return onnx_kernels::kernel::PagedAttention::Formats{};
    return onnx_kernels::kernel::PagedAttention::Formats{{TensorProto::INT8, 0.01f, 0},
                                                         {TensorProto::UINT4, 0.25f, 8}};
  };
  RuntimeContext context;
  context.RegisterKernelFn(
      "ai.rt", "PagedAttention", core::symbolic::Device::kCPU,
      [select_formats](const NodeProto& node, RuntimeContext& rt) -> std::unique_ptr<KernelBase> {
        auto kernel =
            std::make_unique<onnx_kernels::kernel::PagedAttention>(rt.kernel_ctx(), select_formats);
        kernel->set_node(node);
        return kernel;
      });

  auto model = Model();
  RuntimeValueMap initial;
  initial["past"] = onnx_kernels::kernel::PagedAttention::EmptyCache();
  PersistentValueState state(model, std::move(initial));
  for (int step = 0; step < 8; ++step) {
    RuntimeValueMap feeds;
    feeds["q"] = RuntimeValue(Filled("q", {1, 8, 1, 64}, 0.1f * static_cast<float>(step)));
    feeds["k"] = RuntimeValue(Filled("k", {1, 2, 1, 64}, -0.2f));
    feeds["v"] = RuntimeValue(Filled("v", {1, 2, 1, 64}, 0.3f));
    state.Run(context, std::move(feeds));
  }
  const RuntimeValue cache = state.Values().at("past");
  const RuntimeSequence& blocks = cache.field("blocks").elements();
  int64_t tokens = 0;
  for (size_t i = 0; i < blocks.size(); ++i)
    tokens += blocks[i].field("length").tensor().data<int64_t>()[0];
  std::printf("8 decode steps: %lld tokens in %zu pages; the last page's key is %s\n",
              static_cast<long long>(tokens), blocks.size(),
              blocks[blocks.size() - 1].field("key").is_encoded() ? "INT8 codes" : "dense FLOAT");

  // A direct call on the retained cache reports what it cost.
  onnx_kernels::kernel::PagedAttention kernel(context.kernel_ctx(), select_formats);
  kernel.set_node(model->graph().node(0));
  auto r = kernel.Run(Filled("q", {1, 8, 1, 64}, 0.5f), Filled("k", {1, 2, 1, 64}, 0.1f),
                      Filled("v", {1, 2, 1, 64}, 0.2f), cache);
  const auto& s = r.statistics;
  std::printf(
      "direct call: copied %zu bytes, dequantized %zu bytes, %zu bytes of scratch, "
      "%zu pages validated\n",
      s.copied_bytes, s.dequantized_bytes, s.peak_workspace_bytes, s.validated_pages);
  // One token: 2 KV heads x 64 INT8 key codes + 2 x 64 UINT4 value codes.
  const bool ok = tokens == 8 && s.copied_bytes == 2 * 64 + 64 && r.y.shape() == Shape{1, 8, 1, 64};
  return ok ? 0 : 1;
}
