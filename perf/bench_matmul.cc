// SGEMM throughput (GFLOP/s) for square sizes per micro-kernel, prompt-shaped products
// (M = 16 rows times a weight) with B packed per call ("fresh") or once (PackedB, what a
// constant weight gets), decode-shaped GEMV bandwidth (GB/s of the weight streamed) and
// memcpy of the same bytes for comparison.
//   ./build/perf/bench_matmul [--benchmark_filter=Prefill]
#include <benchmark/benchmark.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "executor/parallel.h"
#include "ops/math/gemm.h"
#include "ops/math/vector_ops.h"

namespace math = onnx_light::ops::math;

namespace {

std::vector<float> RandomVector(int64_t n) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

// The arguments of one row a (K floats) times a K x N weight into c: a decode GEMV.
math::GemmArgs RowTimesWeight(int64_t k, int64_t n, const float* a, float* c) {
  math::GemmArgs g;
  g.m = 1;
  g.k = k;
  g.n = n;
  g.a = a;
  g.lda = k;
  g.c = c;
  g.ldc = n;
  return g;
}

// `bytes` worth (at least one) of packed copies of one random K x N weight: cycled through,
// a decode GEMV meets its weight in memory, not in the caches.
std::vector<std::unique_ptr<const math::PackedB>> PackedCopies(int64_t k, int64_t n,
                                                               int64_t bytes) {
  const int64_t copies = std::max<int64_t>(1, bytes / (4 * k * n));
  const std::vector<float> b = RandomVector(k * n);
  std::vector<std::unique_ptr<const math::PackedB>> packs;
  for (int64_t i = 0; i < copies; ++i)
    packs.push_back(std::make_unique<const math::PackedB>(false, k, n, b.data(), n));
  return packs;
}

void Sgemm(benchmark::State& state, math::GemmPath path) {
  const int64_t n = state.range(0);
  const std::vector<float> a = RandomVector(n * n), b = RandomVector(n * n);
  std::vector<float> c(static_cast<size_t>(n * n));
  for (auto _ : state) {
    math::Sgemm(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data(), path);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state) { Sgemm(state, math::GemmPath::kAuto); }
void BM_SgemmAvx2(benchmark::State& state) { Sgemm(state, math::GemmPath::kAvx2); }
void BM_SgemmPortable(benchmark::State& state) { Sgemm(state, math::GemmPath::kPortable); }

// M x K times a K x N weight, B packed per call or once beforehand (PackedB), in an arena
// of `threads` threads (0: the default arena).
void Prefill(benchmark::State& state, int64_t m, int64_t k, int64_t n, bool cached, int threads,
             math::GemmPath path = math::GemmPath::kAuto) {
  const std::vector<float> a = RandomVector(m * k), b = RandomVector(k * n);
  std::vector<float> c(static_cast<size_t>(m * n));
  const math::PackedB packed(false, k, n, b.data(), n);
  math::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.data();
  g.lda = k;
  g.b = b.data();
  g.ldb = n;
  g.c = c.data();
  g.ldc = n;
  tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
  for (auto _ : state) {
    arena.execute([&] { math::Sgemm(g, cached ? &packed : nullptr, path); });
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// range(0..2) = M, K, N; range(3) = 1: B packed once beforehand.
void BM_Prefill(benchmark::State& state) {
  Prefill(state, state.range(0), state.range(1), state.range(2), state.range(3) != 0, 0);
}

// The real-size decoders' prompt products (M = 128 rows times a packed weight) on one
// thread, timed in CPU time: a figure that a shared, noisy machine moves less.
void BM_PrefillOneThread(benchmark::State& state) {
  Prefill(state, state.range(0), state.range(1), state.range(2), true, 1);
}

// The same on the AVX2/FMA micro-kernels (what a CPU without AVX-512 runs).
void BM_PrefillOneThreadAvx2(benchmark::State& state) {
  Prefill(state, state.range(0), state.range(1), state.range(2), true, 1, math::GemmPath::kAvx2);
}

// The same products on two threads (wall time): how the work splits over the cores.
void BM_PrefillTwoThreads(benchmark::State& state) {
  Prefill(state, state.range(0), state.range(1), state.range(2), true, 2);
}

// 1 x K times K x N (trans_b = 0) or times N x K stored transposed (trans_b = 1).
void BM_Gemv(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1);
  const bool trans_b = state.range(2) != 0;
  const std::vector<float> a = RandomVector(k), b = RandomVector(k * n);
  std::vector<float> c(static_cast<size_t>(n));
  for (auto _ : state) {
    math::Sgemm(false, trans_b, 1, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(4.0 * k * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// A decode step's weight traffic: the Qwen2.5-0.5B shape's per-layer products (q, k, v, o,
// gate, up, down: K x N with K = 896 or 4864) packed once, `layers` of them (more bytes than
// any cache), each multiplied by one row in turn, in an arena of `threads` threads. Reported
// as GB/s of packed weight read; BM_ReadLayers reads the same buffers with a plain vector
// sum of squares (the shared vector Dot), so the ratio of the two (in one run) is the GEMV's share
// of the read rate.
struct LayerWeights {
  std::vector<std::unique_ptr<const math::PackedB>> packs;
  std::vector<std::array<int64_t, 2>> shapes;  // K, N
  size_t bytes = 0;
  // shape 0: a Qwen2.5-0.5B layer's seven products; 1: a SmolLM2-135M layer as the plan runs
  // it (Q/K/V and gate/up grouped into one product each).
  LayerWeights(int layers, int shape) {
    const std::vector<std::array<int64_t, 2>> qwen = {
        {896, 896}, {896, 128}, {896, 128}, {896, 896}, {896, 4864}, {896, 4864}, {4864, 896}};
    const std::vector<std::array<int64_t, 2>> smollm2 = {
        {576, 960}, {576, 576}, {576, 3072}, {1536, 576}};
    for (int l = 0; l < layers; ++l)
      for (const auto& [k, n] : shape == 0 ? qwen : smollm2) {
        const std::vector<float> b = RandomVector(k * n);
        packs.push_back(std::make_unique<const math::PackedB>(false, k, n, b.data(), n));
        shapes.push_back({k, n});
        bytes += packs.back()->bytes();
      }
  }
};

// spin: the products run as an inline decode step runs them, the arena's other thread
// spinning between them (SpinTeamScope, spin_wait_us = 1000).
void GemvLayers(benchmark::State& state, bool spin) {
  const int threads = static_cast<int>(state.range(0));
  const LayerWeights w(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const std::vector<float> a = RandomVector(4864);
  std::vector<float> c(4864);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    arena.execute([&] {
      const onnx_light::core::runtime::SpinTeamScope team(
          std::chrono::microseconds(spin ? 1000 : 0));
      for (size_t i = 0; i < w.packs.size(); ++i)
        math::Sgemm(RowTimesWeight(w.shapes[i][0], w.shapes[i][1], a.data(), c.data()),
                    w.packs[i].get());
    });
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// One packed K x N weight times one row, {K, N, threads}, weights cycled over `copies`
// instances (more bytes than the L3) as a decode step meets them: per-call cost of the
// decode GEMV on the small matrices of a real layer.
// `rows` rows times one packed K x N weight, cycled over copies past the L3, in an arena of
// `threads` threads (the callers set the counters).
void RowsTimesPackedWeight(benchmark::State& state, int64_t rows, int64_t k, int64_t n,
                           int threads) {
  const auto packs = PackedCopies(k, n, int64_t{256} << 20);
  const std::vector<float> a = RandomVector(rows * k);
  std::vector<float> c(static_cast<size_t>(rows * n));
  math::GemmArgs g = RowTimesWeight(k, n, a.data(), c.data());
  g.m = rows;
  tbb::task_arena arena(threads);
  size_t next = 0;
  for (auto _ : state) {
    arena.execute([&] { math::Sgemm(g, packs[next].get()); });
    next = (next + 1) % packs.size();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
}

void BM_GemvPackedShape(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1);
  RowsTimesPackedWeight(state, 1, k, n, static_cast<int>(state.range(2)));
  state.counters["GB/s"] =
      benchmark::Counter(4.0 * k * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// One SmolLM2-sized decode GEMV (576 x 576, weights cycled past the L3) after the calling
// thread worked alone for `gap` us, as a decode step's serial nodes do between products:
// wall time shows what waking the arena's idle worker costs (CPU time does not).
void BM_GemvAfterGap(benchmark::State& state) {
  constexpr int64_t k = 576, n = 576;
  const auto gap = std::chrono::microseconds(state.range(0));
  const auto packs = PackedCopies(k, n, int64_t{256} << 20);
  const std::vector<float> a = RandomVector(k);
  std::vector<float> c(static_cast<size_t>(n));
  const math::GemmArgs g = RowTimesWeight(k, n, a.data(), c.data());
  tbb::task_arena arena(2);
  arena.execute([&] {
    size_t next = 0;
    for (auto _ : state) {
      state.PauseTiming();
      const auto until = std::chrono::steady_clock::now() + gap;
      while (std::chrono::steady_clock::now() < until) {
      }
      state.ResumeTiming();
      math::Sgemm(g, packs[next].get());
      next = (next + 1) % packs.size();
      benchmark::DoNotOptimize(c.data());
    }
  });
}
BENCHMARK(BM_GemvAfterGap)
    ->Arg(0)
    ->Arg(20)
    ->Arg(100)
    ->Arg(300)
    ->Arg(1000)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Batched decode (issue 15): `rows` rows (one per request) times every product of `layers`
// SmolLM2-135M layers as the plan runs them, weights met in memory as a step meets them,
// {threads, layers, rows}: rows = 1 is the GEMV, more rows the packed micro-kernel. The
// ratio of a row count's time to the 1-row time is what a batched step costs over a single
// one (bytes read are the same; FLOPs grow with the rows).
void BM_RowsLayers(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const LayerWeights w(static_cast<int>(state.range(1)), 1);
  const int64_t rows = state.range(2);
  const std::vector<float> a = RandomVector(rows * 1536);
  std::vector<float> c(static_cast<size_t>(rows * 3072));
  double flops = 0;
  for (const auto& [k, n] : w.shapes) flops += 2.0 * static_cast<double>(rows * k * n);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    arena.execute([&] {
      for (size_t i = 0; i < w.packs.size(); ++i) {
        math::GemmArgs g = RowTimesWeight(w.shapes[i][0], w.shapes[i][1], a.data(), c.data());
        g.m = rows;
        math::Sgemm(g, w.packs[i].get());
      }
    });
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The same for one product shape, weights cycled past the L3: {rows, K, N, threads}.
void BM_RowsPackedShape(benchmark::State& state) {
  const int64_t rows = state.range(0), k = state.range(1), n = state.range(2);
  RowsTimesPackedWeight(state, rows, k, n, static_cast<int>(state.range(3)));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * k * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void ReadLayers(benchmark::State& state, bool spin) {
  const int threads = static_cast<int>(state.range(0));
  const LayerWeights w(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  tbb::task_arena arena(threads);
  std::vector<float> sums(w.packs.size() * 64);
  for (auto _ : state) {
    arena.execute([&] {
      const onnx_light::core::runtime::SpinTeamScope team(
          std::chrono::microseconds(spin ? 1000 : 0));
      for (size_t i = 0; i < w.packs.size(); ++i) {
        const float* data = w.packs[i]->block(0);
        const int64_t n = static_cast<int64_t>(w.packs[i]->bytes() / sizeof(float));
        // One piece per thread (the runtime's ParallelFor, as the GEMVs use it).
        onnx_light::core::runtime::ParallelFor(threads, 1, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = n * t / threads, e = n * (t + 1) / threads;
            // Each line is fetched once (the second operand hits L1).
            sums[i * 64 + static_cast<size_t>(t)] = math::Dot(data + b, data + b, e - b);
          }
        });
      }
    });
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemvLayers(benchmark::State& state) { GemvLayers(state, false); }
void BM_GemvLayersSpin(benchmark::State& state) { GemvLayers(state, true); }
void BM_ReadLayers(benchmark::State& state) { ReadLayers(state, false); }
void BM_ReadLayersSpin(benchmark::State& state) { ReadLayers(state, true); }

// memcpy of the weight's bytes: reads + writes them (twice the traffic of a GEMV read).
void BM_Memcpy(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1);
  const std::vector<float> src = RandomVector(k * n);
  std::vector<float> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(4.0 * k * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_Sgemm)
    ->RangeMultiplier(2)
    ->Range(64, 1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_SgemmAvx2)
    ->RangeMultiplier(2)
    ->Range(64, 1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_SgemmPortable)
    ->RangeMultiplier(2)
    ->Range(64, 1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// The Llama bench model's projections at a 16-token prompt: q/o, gate/up, down, lm_head.
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{16}, {256}, {256}, {0, 1}})
    ->ArgsProduct({{16}, {256}, {688}, {0, 1}})
    ->ArgsProduct({{16}, {688}, {256}, {0, 1}})
    ->ArgsProduct({{16}, {256}, {1024}, {0, 1}})
    ->ArgsProduct({{128}, {1024}, {1024}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// SmolLM2-135M: q/k/v side by side, o, gate/up side by side, down, the LM head; Qwen2.5-0.5B
// gate/up and down.
// Prompt products of the real-size decoders (128 rows times a packed weight): SmolLM2-135M
// (hidden 576, intermediate 1536) and Qwen2.5-0.5B (hidden 896, QKV group 1152,
// intermediate 4864).
void PromptShapes(benchmark::internal::Benchmark* b) {
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{128, 576, 960},
                                {128, 576, 576},
                                {128, 576, 3072},
                                {128, 1536, 576},
                                {128, 576, 8192},
                                {128, 896, 1152},
                                {128, 896, 9728},
                                {128, 4864, 896}})
    b->Args({m, k, n});
}
BENCHMARK(BM_PrefillOneThread)->Apply(PromptShapes)->Unit(benchmark::kMillisecond);
// Batched decode (one row per request, issue 15): 2-16 rows times SmolLM2-135M's products.
void BatchRowShapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {2, 4, 8, 16})
    for (const auto& [k, n] : {std::array<int64_t, 2>{576, 960}, {576, 3072}, {1536, 576}})
      b->Args({m, k, n});
}
BENCHMARK(BM_PrefillOneThread)->Apply(BatchRowShapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PrefillOneThreadAvx2)->Apply(PromptShapes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillTwoThreads)->Apply(PromptShapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Gemv)
    ->Args({4096, 4096, 0})
    ->Args({4096, 4096, 1})
    ->Args({2048, 8192, 0})
    ->Args({2048, 8192, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// {threads, layers}: 8 layers are 478 MB of packed weights. One thread in CPU time, two in
// wall time.
BENCHMARK(BM_GemvPackedShape)
    ->Args({576, 576, 2})
    ->Args({1536, 576, 2})
    ->Args({576, 3072, 2})
    ->Args({576, 49152, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// {threads, layers, shape}: 8 Qwen2.5 layers; 30 SmolLM2 layers (425 MB, its whole step).
BENCHMARK(BM_GemvLayers)->Args({1, 8, 0})->Args({1, 30, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadLayers)->Args({1, 8, 0})->Args({1, 30, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemvLayers)
    ->Args({2, 8, 0})
    ->Args({2, 30, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GemvLayersSpin)->Args({2, 30, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadLayers)
    ->Args({2, 8, 0})
    ->Args({2, 30, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ReadLayersSpin)->Args({2, 30, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
// {threads, layers, rows}: 30 SmolLM2 layers (425 MB) times 1, 8 and 16 rows.
BENCHMARK(BM_RowsLayers)
    ->ArgsProduct({{1, 2}, {30}, {1, 8, 16}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// {rows, K, N, threads}: SmolLM2-135M's products and LM head, 1 and 8 rows.
BENCHMARK(BM_RowsPackedShape)
    ->ArgsProduct({{1, 8}, {576}, {576, 960, 3072, 49152}, {1, 2}})
    ->ArgsProduct({{1, 8}, {1536}, {576}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Memcpy)
    ->Args({4096, 4096})
    ->Args({2048, 8192})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK_MAIN();
