// Decode attention over a paged cache (ai.rt::PagedAttention) against the contiguous fused
// attention kernel and a plain memory read of the same bytes, in one run: 8 KV heads, 4 query
// heads per KV head, head size 128, one new token over 1k, 8k and 32k cached tokens, pages of
// 16 tokens in dense FLOAT, FLOAT16, INT8, INT4 and INT2, on 1 and 2 threads.
// Also 8 rows with their own caches as one call against 8 calls (BM_RowsDecode).
//   ./build/perf/bench_paged_attention [--benchmark_filter=32768]
// bytes_per_second counts the page payload bytes the call reads (K and V of every token).
#include <benchmark/benchmark.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/cache_page.h"
#include "ops/ai_rt/page_writer.h"
#include "ops/ai_rt/paged_attention.h"
#include "ops/math/x86_intrinsics.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;

namespace {

constexpr int64_t kKvHeads = 8, kGroup = 4, kHead = 128, kPage = 16;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

core::DataType FormatOf(int index) {
  const core::DataType formats[] = {core::DataType::kFloat, core::DataType::kFloat16,
                                    core::DataType::kInt8, core::DataType::kInt4,
                                    core::DataType::kInt2};
  return formats[index];
}

// A FLOAT tensor of `shape` with Random(numel, seed) values.
Tensor RandomTensor(const char* name, Shape shape, uint32_t seed) {
  const int64_t n = ShapeNumel(shape);
  return Tensor::FromFloat(name, std::move(shape), Random(n, seed));
}

// A cache of `tokens` tokens in pages of kPage, all in `format`; built once per shape.
struct PagedCache {
  RuntimeValue cache;
  size_t payload_bytes = 0;
};

const PagedCache& CacheFor(int64_t tokens, int format_index) {
  static std::map<std::pair<int64_t, int>, PagedCache> caches;
  auto& entry = caches[{tokens, format_index}];
  if (!entry.cache.empty()) return entry;
  const ops::ai_rt::PageFormat format{FormatOf(format_index), 0.05f, 0};
  const std::vector<float> rows = Random(kKvHeads * kPage * kHead, 7);
  std::vector<RuntimeValue> blocks;
  for (int64_t t = 0; t < tokens; t += kPage) {
    const ops::ai_rt::RowSource src{rows.data(), kKvHeads * kPage * kHead, kPage * kHead};
    size_t written = 0;
    std::vector<RuntimeValue::Field> f;
    f.emplace_back("start", RuntimeValue(Tensor::FromInt64("", {}, {t})));
    f.emplace_back("length", RuntimeValue(Tensor::FromInt64("", {}, {kPage})));
    for (const char* name : {"key", "value"})
      f.emplace_back(name, ops::ai_rt::EncodePage(format, src, 1, kKvHeads, kPage, kHead, kPage,
                                                  DefaultAllocator(), &written));
    entry.payload_bytes += written;
    blocks.push_back(RuntimeValue::Struct("", std::move(f)));
  }
  std::vector<RuntimeValue::Field> cache;
  cache.emplace_back("blocks",
                     RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(blocks))));
  entry.cache = RuntimeValue::Struct("", std::move(cache));
  return entry;
}

NodeProto PagedNode() {
  NodeProto node;
  node.set_op_type("PagedAttention");
  node.set_domain("ai.rt");
  for (const char* in : {"q", "k", "v", "past"}) node.add_input(in);
  node.add_output("y");
  node.add_output("present");
  auto* a = node.add_attribute();
  a->set_name("max_tokens");
  a->set_type(AttributeProto::INT);
  a->set_i(1 << 20);
  return node;
}

// args: cached tokens, format index, threads.
void BM_PagedDecode(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const PagedCache& paged = CacheFor(tokens, static_cast<int>(state.range(1)));
  tbb::task_arena arena(static_cast<int>(state.range(2)));
  KernelContext ctx;
  PagedAttention kernel(ctx);
  kernel.set_node(PagedNode());
  const Tensor q = Tensor::FromFloat("q", {1, kKvHeads * kGroup, 1, kHead},
                                     Random(kKvHeads * kGroup * kHead, 1));
  const Tensor k = Tensor::FromFloat("k", {1, kKvHeads, 1, kHead}, Random(kKvHeads * kHead, 2));
  const Tensor v = Tensor::FromFloat("v", {1, kKvHeads, 1, kHead}, Random(kKvHeads * kHead, 3));
  for (auto _ : state)
    arena.execute([&] { benchmark::DoNotOptimize(kernel.Run(q, k, v, paged.cache)); });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * paged.payload_bytes));
  state.SetLabel(core::DataTypeName(FormatOf(static_cast<int>(state.range(1)))));
}

// The contiguous fused kernel (ops/fused/scaled_dot_product_attention.cc) on the same shape.
void BM_ContiguousDecode(benchmark::State& state) {
  const int64_t tokens = state.range(0), heads = kKvHeads * kGroup;
  tbb::task_arena arena(static_cast<int>(state.range(1)));
  NodeProto node;
  node.set_op_type("ScaledDotProductAttention");
  node.set_domain("ai.onnx_light.fused");
  for (int i = 0; i < 10; ++i) node.add_input(i == 3 ? "" : "in" + std::to_string(i));
  node.add_output("y");
  RuntimeContext context;
  auto kernel = (*BuiltinKernels().Find("ai.onnx_light.fused", node.op_type(), 1))(
      node, context, KernelInfo(node, context.kernel_ctx()));
  kernel->set_node(node);
  const RuntimeValue q(Tensor::FromFloat("q", {1, heads, 1, kHead}, Random(heads * kHead, 1)));
  const RuntimeValue k(
      Tensor::FromFloat("k", {1, kKvHeads, tokens, kHead}, Random(kKvHeads * tokens * kHead, 2)));
  const RuntimeValue v(
      Tensor::FromFloat("v", {1, kKvHeads, tokens, kHead}, Random(kKvHeads * tokens * kHead, 3)));
  // The layout operands of the repeat-KV subgraph the fused kernel replaces.
  auto ints = [](std::vector<int64_t> d) {
    const auto n = static_cast<int64_t>(d.size());
    return RuntimeValue(Tensor::FromInt64("shape", {n}, std::move(d)));
  };
  const RuntimeValue expand = ints({1, kKvHeads, kGroup, tokens, kHead});
  const RuntimeValue merged = ints({1, heads, tokens, kHead});
  const std::vector<const RuntimeValue*> inputs = {&q,      &k,      &v,      nullptr, &expand,
                                                   &merged, nullptr, nullptr, &expand, &merged};
  for (auto _ : state) {
    RuntimeValue y;
    RuntimeValue* outputs[1] = {&y};
    KernelCall call(&context, node, inputs, outputs);
    arena.execute([&] { kernel->Compute(call); });
    benchmark::DoNotOptimize(y);
  }
  state.SetBytesProcessed(state.iterations() * 2 * kKvHeads * tokens * kHead * 4);
}

// Summing the FLOAT cache's bytes once: the read rate the decode is bound by.
void BM_MemoryRead(benchmark::State& state) {
  const int64_t n = 2 * kKvHeads * state.range(0) * kHead;
  tbb::task_arena arena(static_cast<int>(state.range(1)));
  const std::vector<float> data = Random(n, 9);
  for (auto _ : state) {
    arena.execute([&] {
      const int64_t parts = state.range(1);
      std::vector<uint64_t> sums(static_cast<size_t>(parts));
      // XOR of the words: no dependency chain, so the loop vectorises and only memory limits it.
      const auto* words = reinterpret_cast<const uint64_t*>(data.data());
      const int64_t count = n / 2;
      tbb::parallel_for(int64_t{0}, parts, [&](int64_t p) {
        uint64_t s = 0;
        for (int64_t i = p * count / parts; i < (p + 1) * count / parts; ++i) s ^= words[i];
        sums[static_cast<size_t>(p)] = s;
      });
      benchmark::DoNotOptimize(sums);
    });
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

// Reading the FLOAT cache's pages themselves in the kernel's order (page after page, each KV
// head's key rows then its value rows), pages split across the threads: the read rate of
// these scattered 64 KiB payloads, as against BM_MemoryRead's one contiguous array.
void BM_PageRead(benchmark::State& state) {
  const PagedCache& paged = CacheFor(state.range(0), 0);
  const int64_t parts = state.range(1);
  tbb::task_arena arena(static_cast<int>(parts));
  std::vector<const uint64_t*> keys, values;
  for (const auto& block : ops::ai_rt::CacheBlocks(paged.cache, "bench")) {
    const ops::ai_rt::CachePage page = ops::ai_rt::ReadCachePage(*block, "bench");
    ops::math::CodeRows k, v;
    page.key.CodeRowsAt(0, 0, 0, kPage, &k);
    page.value.CodeRowsAt(0, 0, 0, kPage, &v);
    keys.push_back(static_cast<const uint64_t*>(k.data) + k.first / 2);
    values.push_back(static_cast<const uint64_t*>(v.data) + v.first / 2);
  }
  const auto pages = static_cast<int64_t>(keys.size());
  constexpr int64_t kHeadWords = kPage * kHead / 2;
  for (auto _ : state) {
    arena.execute([&] {
      std::vector<uint64_t> sums(static_cast<size_t>(parts));
      tbb::parallel_for(int64_t{0}, parts, [&](int64_t p) {
        uint64_t s = 0;
        for (int64_t pg = p * pages / parts; pg < (p + 1) * pages / parts; ++pg)
          for (int64_t h = 0; h < kKvHeads; ++h) {
            const uint64_t* kw = keys[static_cast<size_t>(pg)] + h * kHeadWords;
            const uint64_t* vw = values[static_cast<size_t>(pg)] + h * kHeadWords;
            for (int64_t i = 0; i < kHeadWords; ++i) s ^= kw[i];
            for (int64_t i = 0; i < kHeadWords; ++i) s ^= vw[i];
          }
        sums[static_cast<size_t>(p)] = s;
      });
      benchmark::DoNotOptimize(sums);
    });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * paged.payload_bytes));
}

// Continuous-batching decode (issue 15): 8 rows with their own FLOAT caches of different
// lengths (8,192 tokens in all), one new token each, as one call over the assembled rows
// (args {threads, 1}: AssembleRows + Run + SplitRows each iteration) or as 8 calls, one per
// row (args {threads, 0}).
void BM_RowsDecode(benchmark::State& state) {
  const int64_t lengths[] = {128, 1024, 256, 2048, 512, 1536, 384, 2304};
  constexpr int64_t kRows = 8, kHeads = kKvHeads * kGroup;
  const bool batched = state.range(1) == 1;
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  KernelContext ctx;
  PagedAttention kernel(ctx);
  kernel.set_node(PagedNode());
  std::vector<RuntimeValue> caches;
  size_t bytes = 0;
  for (int64_t n : lengths) {
    caches.push_back(CacheFor(n, 0).cache);
    bytes += CacheFor(n, 0).payload_bytes;
  }
  auto tensor = [](const char* name, int64_t batch, int64_t heads, uint32_t seed) {
    return Tensor::FromFloat(name, {batch, heads, 1, kHead}, Random(batch * heads * kHead, seed));
  };
  const Tensor q = tensor("q", kRows, kHeads, 1), k = tensor("k", kRows, kKvHeads, 2),
               v = tensor("v", kRows, kKvHeads, 3);
  std::vector<Tensor> qs, ks, vs;  // the same rows as separate [1, ...] inputs
  for (int64_t b = 0; b < kRows; ++b) {
    qs.push_back(tensor("q", 1, kHeads, 1 + 10 * static_cast<uint32_t>(b)));
    ks.push_back(tensor("k", 1, kKvHeads, 2 + 10 * static_cast<uint32_t>(b)));
    vs.push_back(tensor("v", 1, kKvHeads, 3 + 10 * static_cast<uint32_t>(b)));
  }
  for (auto _ : state)
    arena.execute([&] {
      if (batched) {
        auto r = kernel.Run(q, k, v, PagedAttention::AssembleRows(caches));
        benchmark::DoNotOptimize(PagedAttention::SplitRows(r.present));
      } else {
        for (size_t b = 0; b < kRows; ++b)
          benchmark::DoNotOptimize(kernel.Run(qs[b], ks[b], vs[b], caches[b]));
      }
    });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(batched ? "one call, 8 rows" : "8 calls");
}

// One batched decode step of a SmolLM2-shaped layer (issue 15): 8 rows with their own FLOAT
// caches of 128-184 tokens (9 query / 3 KV heads of 64), one new token each, the last pages
// filled in place (PagedTail::kExclusive, as in a scheduler's run) and the present split back
// into the rows; every 64 steps the rows restart from their first caches. What this times is
// mostly the call's per-row bookkeeping (pages, memo, append), not its arithmetic. Second
// arg: MiB read between calls (64: the cache hierarchy as a decoder's layers leave it).
void BM_RowsStep(benchmark::State& state) {
  constexpr int64_t kRows = 8, kKv = 3, kHeads = 9, kD = 64;
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  KernelContext ctx;
  PagedAttention kernel(ctx);
  kernel.set_node(PagedNode());
  std::vector<RuntimeValue> first;
  for (int64_t b = 0; b < kRows; ++b) {
    const Tensor k = RandomTensor("k", {1, kKv, 128, kD}, 11 + static_cast<uint32_t>(b));
    const Tensor q = RandomTensor("q", {1, kHeads, 128, kD}, 5 + static_cast<uint32_t>(b));
    first.push_back(
        kernel.Run(q, k, k, PagedAttention::EmptyCache(), DefaultAllocator(), PagedTail::kExclusive)
            .present);
  }
  const Tensor q = RandomTensor("q", {kRows, kHeads, 1, kD}, 1),
               k = RandomTensor("k", {kRows, kKv, 1, kD}, 2),
               v = RandomTensor("v", {kRows, kKv, 1, kD}, 3);
  std::vector<RuntimeValue> caches = first;
  std::vector<float> evict(static_cast<size_t>(state.range(1)) << 18);  // MiB
  int64_t step = 0;
  for (auto _ : state) {
    if (step++ % 64 == 0) caches = first;
    if (!evict.empty()) {  // what a layer's weights do to the caches between its calls
      state.PauseTiming();
      float sum = 0;  // read, as weights are
      for (size_t e = 0; e < evict.size(); e += 16) sum += evict[e];
      benchmark::DoNotOptimize(sum);
      state.ResumeTiming();
    }
    arena.execute([&] {
      auto r = kernel.Run(q, k, v, PagedAttention::AssembleRows(std::move(caches)),
                          DefaultAllocator(), PagedTail::kExclusive);
      caches = PagedAttention::SplitRows(r.present);
    });
  }
  state.SetLabel("8 rows, SmolLM2 layer");
}

// The multiply-adds a decode call over `tokens` needs whatever its page format, with nothing
// else: every token and KV head costs kGroup query heads x (kHead for the score + kHead for
// the value sum) FLOAT multiply-adds. Twelve independent 512-bit FMA chains in registers, the
// count split across the threads: the floor no FLOAT-arithmetic kernel goes under (the
// quantized formats' goals against FLOAT are read against it in perf/README.md).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float MultiplyAdds(int64_t vectors) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < vectors; i += kChains)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}

// args: cached tokens, threads.
void BM_MultiplyAddFloor(benchmark::State& state) {
  const int64_t threads = state.range(1);
  const int64_t vectors = state.range(0) * kKvHeads * kGroup * 2 * kHead / 16 / threads;
  tbb::task_arena arena(static_cast<int>(threads));
  for (auto _ : state)
    arena.execute([&] {
      tbb::parallel_for(int64_t{0}, threads,
                        [&](int64_t) { benchmark::DoNotOptimize(MultiplyAdds(vectors)); });
    });
  state.SetItemsProcessed(state.iterations() * vectors * threads * 16);
  state.SetLabel("FLOAT multiply-adds of one decode call");
}
#endif

// A 128-token prompt of a SmolLM2-shaped layer (9 query / 3 KV heads of 64) from an empty
// cache: the prefill call (causal, every query its own task).
void BM_Prefill(benchmark::State& state) {
  constexpr int64_t kLen = 128, kKv = 3, kHeads = 9, kD = 64;
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  KernelContext ctx;
  PagedAttention kernel(ctx);
  kernel.set_node(PagedNode());
  const Tensor q = RandomTensor("q", {1, kHeads, kLen, kD}, 1),
               k = RandomTensor("k", {1, kKv, kLen, kD}, 2),
               v = RandomTensor("v", {1, kKv, kLen, kD}, 3);
  const RuntimeValue empty = PagedAttention::EmptyCache();
  for (auto _ : state) arena.execute([&] { benchmark::DoNotOptimize(kernel.Run(q, k, v, empty)); });
  state.SetLabel("128-token prompt, SmolLM2 layer");
}

void PagedArgs(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1024, 8192, 32768})
    for (int format = 0; format < 5; ++format)
      for (int threads : {1, 2}) b->Args({tokens, format, threads});
}

void ContiguousArgs(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1024, 8192, 32768})
    for (int threads : {1, 2}) b->Args({tokens, threads});
}

}  // namespace

BENCHMARK(BM_PagedDecode)->Apply(PagedArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_RowsDecode)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_RowsStep)
    ->ArgsProduct({{1, 2}, {0, 64}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Prefill)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ContiguousDecode)->Apply(ContiguousArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MemoryRead)->Apply(ContiguousArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_PageRead)->Apply(ContiguousArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
#if defined(__x86_64__)
BENCHMARK(BM_MultiplyAddFloor)->Apply(ContiguousArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif
BENCHMARK_MAIN();
