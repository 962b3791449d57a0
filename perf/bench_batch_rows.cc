// One decode step of 8 requests as one model call (RunRows, state/batch_rows.h) against 8
// calls, one per request, on a SmolLM2-135M-shaped decoder cut to 4 layers (hidden 576,
// 9 query / 3 KV heads of 64, MLP 1536, vocab 49152, random FLOAT weights) whose attention
// is ai.rt::PagedAttention over a sequence of row caches per layer. Each request holds a
// 128-token prompt in its caches; the step's new pages are discarded (the rows' caches are
// copied by handle per iteration), so every iteration decodes from the same caches.
//   ./build/perf/bench_batch_rows [--benchmark_filter=/2/]
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/paged_attention.h"
#include "state/batch_rows.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;

namespace {

constexpr int64_t kLayers = 4, kHidden = 576, kHeads = 9, kKvHeads = 3, kHeadSize = 64, kMlp = 1536,
                  kVocab = 49152, kRows = 8, kPrompt = 128;

void AddNode(GraphProto* g, const std::string& op, std::vector<std::string> inputs,
             std::vector<std::string> outputs, const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name(outputs.front());
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
}

void AddWeight(GraphProto* g, const std::string& name, std::vector<int64_t> dims, float scale) {
  static std::mt19937 gen(7);
  std::normal_distribution<float> dist(0, scale);
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

void AddInts(GraphProto* g, const std::string& name, std::vector<int64_t> values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

void AddPerm(GraphProto* g, const std::string& in, const std::string& out) {
  AddNode(g, "Transpose", {in}, {out});
  auto* a = g->mutable_node(g->node_size() - 1)->add_attribute();
  a->set_name("perm");
  a->set_type(AttributeProto::INTS);
  for (int64_t p : {0, 2, 1, 3}) a->add_ints(p);
}

// input_ids [B, L] -> kLayers x (paged attention over past_i (a sequence of row caches,
// past_i <- present_i) + residual, Relu MLP + residual) -> logits [B, L, vocab].
std::shared_ptr<ModelProto> Decoder() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* rt = model->add_opset_import();
  rt->set_domain("ai.rt");
  rt->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("batch_rows_decoder");
  auto* ids = g->add_input();
  ids->set_name("input_ids");
  auto* it = ids->mutable_type()->mutable_tensor_type();
  it->set_elem_type(TensorProto::INT64);
  it->mutable_shape()->add_dim()->set_dim_param("batch");
  it->mutable_shape()->add_dim()->set_dim_param("length");
  auto* logits = g->add_output();
  logits->set_name("logits");
  logits->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  AddWeight(g, "embed", {kVocab, kHidden}, 0.5f);
  AddWeight(g, "lm_head", {kHidden, kVocab}, 0.05f);
  AddInts(g, "q_shape", {0, 0, kHeads, kHeadSize});
  AddInts(g, "kv_shape", {0, 0, kKvHeads, kHeadSize});
  AddInts(g, "y_shape", {0, 0, kHeads * kHeadSize});
  AddNode(g, "Gather", {"embed", "input_ids"}, {"h0"});
  std::string h = "h0";
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "l" + std::to_string(l) + "_", past = "past_" + std::to_string(l),
                      present = "present_" + std::to_string(l);
    auto* in = g->add_input();
    in->set_name(past);
    in->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_struct_type();
    auto* out = g->add_output();
    out->set_name(present);
    *out->mutable_type() = in->type();
    auto* bind = g->add_persistent_bindings();
    bind->set_input_name(past);
    bind->set_output_name(present);
    AddWeight(g, p + "wq", {kHidden, kHeads * kHeadSize}, 0.04f);
    AddWeight(g, p + "wk", {kHidden, kKvHeads * kHeadSize}, 0.04f);
    AddWeight(g, p + "wv", {kHidden, kKvHeads * kHeadSize}, 0.04f);
    AddWeight(g, p + "wo", {kHeads * kHeadSize, kHidden}, 0.04f);
    AddWeight(g, p + "up", {kHidden, kMlp}, 0.04f);
    AddWeight(g, p + "down", {kMlp, kHidden}, 0.03f);
    for (const char* s : {"q", "k", "v"}) {
      const std::string n = p + s;
      AddNode(g, "MatMul", {h, p + "w" + s}, {n + "_flat"});
      AddNode(g, "Reshape", {n + "_flat", std::string(s) == "q" ? "q_shape" : "kv_shape"},
              {n + "_bshd"});
      AddPerm(g, n + "_bshd", n + "_heads");
    }
    AddNode(g, "PagedAttention", {p + "q_heads", p + "k_heads", p + "v_heads", past},
            {p + "attn", present}, "ai.rt");
    AddPerm(g, p + "attn", p + "attn_bshd");
    AddNode(g, "Reshape", {p + "attn_bshd", "y_shape"}, {p + "attn_flat"});
    AddNode(g, "MatMul", {p + "attn_flat", p + "wo"}, {p + "attn_out"});
    AddNode(g, "Add", {h, p + "attn_out"}, {p + "mid"});
    AddNode(g, "MatMul", {p + "mid", p + "up"}, {p + "up_out"});
    AddNode(g, "Relu", {p + "up_out"}, {p + "act"});
    AddNode(g, "MatMul", {p + "act", p + "down"}, {p + "down_out"});
    AddNode(g, "Add", {p + "mid", p + "down_out"}, {p + "out"});
    h = p + "out";
  }
  AddNode(g, "MatMul", {h, "lm_head"}, {"logits"});
  return model;
}

struct Setup {
  std::shared_ptr<const ModelProto> model = Decoder();
  RuntimeSession session{model};
  RuntimeContext context;
  std::vector<RuntimeValueMap> rows;  // each request's caches after its prompt

  Setup() {
    for (int64_t r = 0; r < kRows; ++r) {
      RuntimeValueMap caches;
      for (int64_t l = 0; l < kLayers; ++l)
        caches["past_" + std::to_string(l)] = PagedAttention::EmptyCache();
      std::vector<int64_t> prompt(kPrompt);
      for (int64_t t = 0; t < kPrompt; ++t) prompt[static_cast<size_t>(t)] = (t * 31 + r) % kVocab;
      RuntimeValueMap feeds;
      feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {1, kPrompt}, prompt));
      RunRows(session, context, std::move(feeds), {&caches});
      rows.push_back(std::move(caches));
    }
  }
};

Setup& Shared() {
  static Setup setup;
  return setup;
}

// args: threads, batched (1: one call of 8 rows, 0: 8 calls of one row).
void BM_DecodeStep(benchmark::State& state) {
  Setup& s = Shared();
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  const bool batched = state.range(1) == 1;
  for (auto _ : state) {
    std::vector<RuntimeValueMap> rows = s.rows;  // handles: this step's pages are discarded
    arena.execute([&] {
      if (batched) {
        std::vector<RuntimeValueMap*> all;
        std::vector<int64_t> last;
        for (int64_t r = 0; r < kRows; ++r) {
          all.push_back(&rows[static_cast<size_t>(r)]);
          last.push_back(r + 1);
        }
        RuntimeValueMap feeds;
        feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {kRows, 1}, last));
        benchmark::DoNotOptimize(RunRows(s.session, s.context, std::move(feeds), all));
      } else {
        for (int64_t r = 0; r < kRows; ++r) {
          RuntimeValueMap feeds;
          feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {1, 1}, {r + 1}));
          benchmark::DoNotOptimize(
              RunRows(s.session, s.context, std::move(feeds), {&rows[static_cast<size_t>(r)]}));
        }
      }
    });
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(kRows), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(batched ? "one call, 8 rows" : "8 calls");
}

}  // namespace

BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_MAIN();
