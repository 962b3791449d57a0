// Per-step cost of PersistentValueState::Run against a stateless RuntimeSession::Run of the
// same graph whose bound outputs are fed back by hand (issue 4), on the spec's one-node Add
// graph and on a 24-node chain (the models of perf/bench_state_step.py). Both sides build
// the same feed map per step (the `delta` tensor is shared, not copied); the stateless side
// then moves each bound output into its next feeds, using the model's bindings only.
//   ./build/perf/bench_state_step [--benchmark_repetitions=5]
// Compare BM_StateRun/x with BM_StatelessRunWithFeedback/x of the same run.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"
#include "onnx_light.pb.h"
#include "state/persistent_value_state.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

std::shared_ptr<const ModelProto> Bind(ModelProto model) {
  auto* binding = model.mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return std::make_shared<const ModelProto>(std::move(model));
}

std::shared_ptr<const ModelProto> AddModel() {
  return Bind(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "accumulate (float[2] delta, float[2] past) => (float[2] present)"
                       "{ present = Add(delta, past) }"));
}

// t0 = Add(delta, past); t_i = Mul or Add(t_{i-1}, delta); present = Identity(t_{n-2}).
std::shared_ptr<const ModelProto> ChainModel(int nodes) {
  std::string body = "t0 = Add(delta, past) ";
  for (int i = 1; i < nodes - 1; ++i)
    body += "t" + std::to_string(i) + " = " + (i % 2 ? "Mul" : "Add") + "(t" +
            std::to_string(i - 1) + ", delta) ";
  body += "present = Identity(t" + std::to_string(nodes - 2) + ")";
  return Bind(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "chain (float[2] delta, float[2] past) => (float[2] present) {" +
                       body + "}"));
}

std::shared_ptr<const ModelProto> ModelFor(int64_t nodes) {
  return nodes == 1 ? AddModel() : ChainModel(static_cast<int>(nodes));
}

RuntimeValue Floats(const char* name, std::vector<float> values) {
  return RuntimeValue(Tensor::FromFloat(name, {2}, std::move(values)));
}

void BM_StateRun(benchmark::State& bench) {
  auto model = ModelFor(bench.range(0));
  PersistentValueState state(model, {{"past", Floats("past", {0.f, 0.f})}});
  RuntimeContext context(KernelContext(18));
  const RuntimeValue delta = Floats("delta", {1.f, 1.f});
  for (auto _ : bench) {
    RuntimeValueMap feeds;
    feeds.emplace("delta", delta);
    RuntimeValueMap out = state.Run(context, std::move(feeds));
    benchmark::DoNotOptimize(out);
  }
  // Exact in float below 2^24 steps: one delta per step, nothing lost or repeated.
  const bool exact = bench.range(0) == 1 && bench.iterations() < (int64_t{1} << 24);
  if (exact && state.Values().at("past").tensor().ToFloatVector()[0] !=
                   static_cast<float>(bench.iterations()))
    bench.SkipWithError("the state did not accumulate one delta per step");
}

void BM_StatelessRunWithFeedback(benchmark::State& bench) {
  auto model = ModelFor(bench.range(0));
  RuntimeSession session(model);
  RuntimeContext context(KernelContext(18));
  std::vector<std::pair<std::string, std::string>> bindings;
  for (const auto& b : model->graph().persistent_bindings())
    bindings.emplace_back(b.input_name(), b.output_name());
  RuntimeValueMap fed;
  fed.emplace("past", Floats("past", {0.f, 0.f}));
  const RuntimeValue delta = Floats("delta", {1.f, 1.f});
  for (auto _ : bench) {
    RuntimeValueMap feeds = std::move(fed);
    feeds.emplace("delta", delta);
    RuntimeValueMap out = session.Run(context, std::move(feeds));
    fed = RuntimeValueMap();
    for (const auto& [input, output] : bindings) fed.emplace(input, std::move(out.at(output)));
    benchmark::DoNotOptimize(out);
  }
  const bool exact = bench.range(0) == 1 && bench.iterations() < (int64_t{1} << 24);
  if (exact && fed.at("past").tensor().ToFloatVector()[0] != static_cast<float>(bench.iterations()))
    bench.SkipWithError("the hand feedback did not accumulate one delta per step");
}

}  // namespace

// Argument: node count (1 = the spec's Add graph, 24 = the chain).
BENCHMARK(BM_StateRun)->Arg(1)->Arg(24)->Unit(benchmark::kNanosecond)->UseRealTime();
BENCHMARK(BM_StatelessRunWithFeedback)
    ->Arg(1)
    ->Arg(24)
    ->Unit(benchmark::kNanosecond)
    ->UseRealTime();

BENCHMARK_MAIN();
