// Exp-based FLOAT kernels (Sigmoid, Exp, Tanh, Softmax, LogSoftmax) run through the built-in
// kernel registry on the shapes of an LLM decoder: [128, 1536] (a prompt's MLP activation)
// and [1, 9, 1, 1024] (one token's attention scores). Reports ns per element, output
// allocation included (what a graph pays per node). `/1` runs in a one-thread arena (per-core
// cost), `/0` in the default arena (all cores). Vec*/<path> time the array functions of
// ops/math/vexp.h alone on one thread, per implementation: the portable path is the libm loop
// the kernels ran before, so it gives a same-run before/after ratio.
//   ./build/perf/bench_elementwise [--benchmark_filter=Sigmoid]
#include <benchmark/benchmark.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "executor/kernel.h"
#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"
#include "ops/math/vexp.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

void RunOp(benchmark::State& state, const std::string& op, const Shape& shape) {
  NodeProto node;
  node.set_op_type(op);
  node.set_name("bench");
  node.add_input("x");
  node.add_output("y");
  RuntimeContext ctx(KernelContext(OpsetMap{{"", 20}}));
  const auto* factory = BuiltinKernels().Find("", op, 20);
  if (!factory) {
    state.SkipWithError("kernel not found");
    return;
  }
  auto kernel = (*factory)(node, ctx, KernelInfo(node, ctx.kernel_ctx()));
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  std::vector<float> values(static_cast<size_t>(ShapeNumel(shape)));
  for (auto& v : values) v = dist(gen);
  const RuntimeValue input(Tensor::FromFloat("x", shape, values));
  const RuntimeValue* inputs[] = {&input};
  tbb::task_arena arena(state.range(0) == 1 ? 1 : tbb::task_arena::automatic);
  double seconds = 0;
  arena.execute([&] {
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      RuntimeValue output;
      RuntimeValue* outputs[] = {&output};
      KernelCall call(&ctx, node, inputs, outputs);
      kernel->Compute(call);
      benchmark::DoNotOptimize(output);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  });
  const double elements = static_cast<double>(state.iterations()) * values.size();
  state.counters["ns/elem"] = seconds * 1e9 / elements;
}

void Register(const std::string& op) {
  const std::pair<const char*, Shape> shapes[] = {{"128x1536", {128, 1536}},
                                                  {"1x9x1x1024", {1, 9, 1, 1024}}};
  for (const auto& [label, shape] : shapes)
    benchmark::RegisterBenchmark((op + "/" + label).c_str(),
                                 [op, shape = shape](benchmark::State& s) { RunOp(s, op, shape); })
        ->Arg(1)
        ->Arg(0)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

namespace math = onnx_light::ops::math;

void RunVec(benchmark::State& state, void (*fn)(const float*, float*, int64_t, math::VecPath),
            math::VecPath path) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  std::vector<float> x(128 * 1536), y(x.size());
  for (auto& v : x) v = dist(gen);
  for (auto _ : state) {
    fn(x.data(), y.data(), static_cast<int64_t>(x.size()), path);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(x.size()));
  state.SetLabel(math::ResolveVecPath(path) == path ? "" : "falls back on this CPU");
}

void RegisterVec(const char* name, void (*fn)(const float*, float*, int64_t, math::VecPath)) {
  const std::pair<const char*, math::VecPath> paths[] = {{"portable", math::VecPath::kPortable},
                                                         {"avx2", math::VecPath::kAvx2},
                                                         {"avx512", math::VecPath::kAvx512}};
  for (const auto& [label, path] : paths)
    benchmark::RegisterBenchmark((std::string(name) + "/" + label).c_str(),
                                 [fn, path = path](benchmark::State& s) { RunVec(s, fn, path); })
        ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* op : {"Sigmoid", "Softmax", "LogSoftmax", "Exp", "Tanh"}) Register(op);
  RegisterVec("VecExp", math::VecExp);
  RegisterVec("VecSigmoid", math::VecSigmoid);
  RegisterVec("VecTanh", math::VecTanh);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
