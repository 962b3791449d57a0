// The int4 decode GEMV (MatMulNBits accuracy_level 4: int8 activations) per SIMD path, on the
// real decoders' shapes, as GB/s of packed weights read: {K, N, path, in_cache}. path 0 =
// AVX2 maddubs, 1 = AVX-512 VNNI + VBMI (the default where the CPU has it). in_cache 1 reuses
// one weight (it stays in L2/L3: the instruction cost), 0 cycles through copies worth 256 MiB
// (more than the L3: the read rate). BM_Read reads the same bytes with a vector sum.
//   ./build/perf/bench_nbits_gemv [--benchmark_filter=49152]
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "ops/contrib/nbits_gemm.h"
#include "ops/math/cpu_features.h"
#include "ops/math/vector_ops.h"

namespace contrib = onnx_light::ops::contrib;
namespace math = onnx_light::ops::math;

namespace {

struct Weights {
  std::vector<std::unique_ptr<contrib::PackedNBits>> copies;
  size_t bytes = 0;  // of one copy
  Weights(int64_t k, int64_t n, bool in_cache) {
    constexpr int64_t kBlock = 32;
    const int64_t k_blocks = (k + kBlock - 1) / kBlock;
    std::mt19937 gen(7);
    std::vector<uint8_t> b(static_cast<size_t>(n * k_blocks * kBlock / 2));
    for (auto& x : b) x = static_cast<uint8_t>(gen());
    std::vector<float> scales(static_cast<size_t>(n * k_blocks), 0.01f);
    contrib::NBitsSource src;
    src.bits = 4;
    src.n = n;
    src.k = k;
    src.block = kBlock;
    src.b = b.data();
    src.scales = scales.data();
    const int64_t count =
        in_cache ? 1 : std::max<int64_t>(1, (int64_t{256} << 20) / static_cast<int64_t>(b.size()));
    for (int64_t i = 0; i < count; ++i)
      copies.push_back(std::make_unique<contrib::PackedNBits>(src));
    bytes = copies.front()->bytes();
  }
};

// Times NBitsGemv on the weights of state.range(0..1, 3) with the given path and compute.
void RunGemv(benchmark::State& state, contrib::NBitsPath path, contrib::NBitsCompute compute) {
  const int64_t k = state.range(0), n = state.range(1);
  const Weights w(k, n, state.range(3) != 0);
  std::vector<float> a(static_cast<size_t>(k)), y(static_cast<size_t>(n));
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  for (auto& x : a) x = dist(gen);
  tbb::task_arena arena(2);
  size_t next = 0;
  for (auto _ : state) {
    arena.execute([&] { contrib::NBitsGemv(*w.copies[next], a.data(), y.data(), path, compute); });
    next = (next + 1) % w.copies.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Int4Gemv(benchmark::State& state) {
  const bool vnni = state.range(2) != 0;
  if (vnni && !math::CpuHasAvx512VnniVbmi()) {
    state.SkipWithError("this CPU has no AVX-512 VNNI + VBMI");
    return;
  }
  RunGemv(state, vnni ? contrib::NBitsPath::kAvx512 : contrib::NBitsPath::kAvx2,
          contrib::NBitsCompute::kInt8);
}

// The same GEMV with float activations (accuracy_level 0, what onnxruntime's
// MatMulNBitsQuantizer writes by default: the Hub's model_q4 files): {K, N, -, in_cache}.
void BM_Int4GemvFloat(benchmark::State& state) {
  RunGemv(state, contrib::NBitsPath::kAuto, contrib::NBitsCompute::kFloat);
}

// SmolLM2-135M: gate/up (K 576, N 1536), down (1536 x 576), the LM head (576 x 49152);
// Qwen2.5-0.5B: gate/up (896 x 4864).
void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [k, n] :
       {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {896, 4864}, {576, 49152}})
    for (int64_t in_cache : {1, 0})
      for (int64_t path : {0, 1}) b->Args({k, n, path, in_cache});
}

}  // namespace

BENCHMARK(BM_Int4Gemv)->Apply(Shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Int4GemvFloat)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (const auto& [k, n] : {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {896, 4864}})
        for (int64_t in_cache : {1, 0}) b->Args({k, n, 0, in_cache});
    })
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_MAIN();
