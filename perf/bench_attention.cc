// Decode attention: ai.onnx_light.fused::ScaledDotProductAttention for one query over a
// KV cache read in place from an append-capacity buffer (strided view), on the real shapes:
// SmolLM2-135M (9 heads, 3 KV heads, 64 dims) and Qwen2.5-0.5B (14 heads, 2 KV heads).
// "Layers" cycles through 30 caches (one per layer, as in a decode step) so K and V come
// from memory, not from the cache the previous iteration warmed; GB/s counts K and V read.
//   ./build/perf/bench_attention [--benchmark_filter=Layers]
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

constexpr int64_t kDims = 64;

bool g_huge = false;

std::shared_ptr<float> RandomStore(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0, 1);
  const size_t bytes = (static_cast<size_t>(n) * 4 + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  float* p = static_cast<float*>(std::aligned_alloc(2 << 20, bytes));
  if (g_huge) madvise(p, bytes, MADV_HUGEPAGE);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen);
  return std::shared_ptr<float>(p, [](float* x) { std::free(x); });
}

Tensor Ints(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromInt64("shape", {n}, std::move(v));
}

// One fused attention node with its layout operands, and `layers` caches of `keys` rows
// (capacity keys + 64) per KV head.
struct DecodeAttention {
  NodeProto node;
  RuntimeContext context;
  std::unique_ptr<KernelBase> kernel;
  std::vector<RuntimeValue> q, k, v, layout;
  RuntimeValue mask;

  DecodeAttention(int64_t heads, int64_t kv_heads, int64_t keys, int layers) {
    node.set_op_type("ScaledDotProductAttention");
    node.set_domain("ai.onnx_light.fused");
    node.set_name("sdpa");
    for (int i = 0; i < 10; ++i) node.add_input("in" + std::to_string(i));
    node.add_output("y");
    kernel = (*BuiltinKernels().Find("ai.onnx_light.fused", node.op_type(), 1))(
        node, context, KernelInfo(node, context.kernel_ctx()));
    kernel->set_node(node);
    const int64_t capacity = keys + 64, rep = heads / kv_heads;
    for (int l = 0; l < layers; ++l) {
      auto qs = RandomStore(heads * kDims, 1 + l);
      q.emplace_back(Tensor::FromFloat("q", {1, heads, 1, kDims},
                                       std::vector<float>(qs.get(), qs.get() + heads * kDims)));
      for (auto* out : {&k, &v}) {
        auto store = RandomStore(kv_heads * capacity * kDims, 100 + l + (out == &v ? 50 : 0));
        out->emplace_back(Tensor::StridedView(
            "cache", DataType::kFloat, {1, kv_heads, keys, kDims},
            {kv_heads * capacity * kDims, capacity * kDims, kDims, 1}, store.get(), store));
      }
    }
    mask = RuntimeValue(Tensor::FromFloat("m", {1, 1, 1, keys},
                                          std::vector<float>(static_cast<size_t>(keys), 0.0f)));
    const std::vector<int64_t> expand = {1, kv_heads, rep, keys, kDims},
                               merged = {1, heads, keys, kDims};
    layout = {RuntimeValue(Ints(expand)), RuntimeValue(Ints(merged)), RuntimeValue(Ints(expand)),
              RuntimeValue(Ints(merged))};
  }

  void Run(size_t l) {
    const RuntimeValue* in[10] = {&q[l],      &k[l],   &v[l],   &mask,      &layout[0],
                                  &layout[1], nullptr, nullptr, &layout[2], &layout[3]};
    RuntimeValue out;
    RuntimeValue* outs[] = {&out};
    KernelCall call(&context, node, in, outs);
    kernel->Compute(call);
    benchmark::DoNotOptimize(out.tensor().data<float>());
  }
};

void Decode(benchmark::State& state, int64_t heads, int64_t kv_heads, int layers,
            bool huge = false) {
  const int64_t keys = state.range(0);
  g_huge = huge;
  DecodeAttention attention(heads, kv_heads, keys, layers);
  size_t l = 0;
  for (auto _ : state) {
    attention.Run(l);
    l = (l + 1) % static_cast<size_t>(layers);
  }
  const double bytes = 2.0 * kv_heads * keys * kDims * sizeof(float);
  state.counters["GB/s"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DecodeSmolLM2(benchmark::State& state) { Decode(state, 9, 3, 1); }
void BM_DecodeSmolLM2Layers(benchmark::State& state) { Decode(state, 9, 3, 30); }
void BM_DecodeSmolLM2LayersHuge(benchmark::State& state) { Decode(state, 9, 3, 30, true); }
void BM_DecodeQwen(benchmark::State& state) { Decode(state, 14, 2, 1); }
void BM_DecodeQwenLayers(benchmark::State& state) { Decode(state, 14, 2, 24); }

}  // namespace

BENCHMARK(BM_DecodeSmolLM2)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DecodeSmolLM2Layers)
    ->Arg(128)
    ->Arg(1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeSmolLM2LayersHuge)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DecodeQwen)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_DecodeQwenLayers)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
