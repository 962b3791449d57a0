// Per-call overhead of the async surfaces over a plain PersistentValueState::Run (issue 6),
// on the spec's one-node Add graph (so that the overhead is not hidden by kernel work):
//   BM_Run               state.Run(ctx, feeds)
//   BM_TaskAwait         co_await of a Task wrapping Run, inside one coroutine loop
//   BM_TaskSyncWait      SyncWait(Task) per call (a semaphore handshake per call)
//   BM_AsyncRunAwaitable co_await state.AsyncRun(ctx, feeds, asio::use_awaitable) on an
//                        io_context (runs on a TBB worker, resumes on the io thread)
//   BM_AsyncRunFuture    state.AsyncRun(ctx, feeds, asio::use_future).get()
//   ./build/perf/bench_async_run
// Subtract BM_Run's time from the others of the same run to get the overhead per call.
#include <benchmark/benchmark.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <memory>
#include <utility>
#include <vector>

#include "core/text_parser.h"
#include "executor/task.h"
#include "onnx_light.pb.h"
#include "state/async_state.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

constexpr int64_t kBatch = 256;  // calls per coroutine loop

std::shared_ptr<const ModelProto> Accumulate() {
  auto model = std::make_shared<ModelProto>(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "accumulate (float[2] delta, float[2] past) => (float[2] present)"
                       "{ present = Add(delta, past) }"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

struct Fixture {
  Fixture()
      : state(Accumulate(), {{"past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f}))}}),
        delta(Tensor::FromFloat("delta", {2}, {1.f, 1.f})) {}

  RuntimeValueMap Feeds() const {
    RuntimeValueMap feeds;
    feeds.emplace("delta", delta);  // shares the payload
    return feeds;
  }
  // Every benchmark checks that each call advanced the state by one delta.
  void Check(benchmark::State& bench) const {
    const float sum = state.Values().at("past").tensor().ToFloatVector()[0];
    if (bench.iterations() < (int64_t{1} << 24) && sum != static_cast<float>(bench.iterations()))
      bench.SkipWithError("the state did not advance once per call");
  }

  PersistentValueState state;
  RuntimeContext context{KernelContext(18)};
  RuntimeValue delta;
};

void BM_Run(benchmark::State& bench) {
  Fixture f;
  for (auto _ : bench) {
    RuntimeValueMap out = f.state.Run(f.context, f.Feeds());
    benchmark::DoNotOptimize(out);
  }
  f.Check(bench);
}

Task<RuntimeValueMap> RunTask(Fixture& f) { co_return f.state.Run(f.context, f.Feeds()); }

Task<void> AwaitLoop(Fixture& f, int64_t calls) {
  for (int64_t i = 0; i < calls; ++i) {
    RuntimeValueMap out = co_await RunTask(f);
    benchmark::DoNotOptimize(out);
  }
}

void BM_TaskAwait(benchmark::State& bench) {
  Fixture f;
  while (bench.KeepRunningBatch(kBatch)) SyncWait(AwaitLoop(f, kBatch));
  f.Check(bench);
}

void BM_TaskSyncWait(benchmark::State& bench) {
  Fixture f;
  for (auto _ : bench) {
    RuntimeValueMap out = SyncWait(RunTask(f));
    benchmark::DoNotOptimize(out);
  }
  f.Check(bench);
}

asio::awaitable<void> AsyncLoop(Fixture& f, int64_t calls) {
  for (int64_t i = 0; i < calls; ++i) {
    RuntimeValueMap out = co_await f.state.AsyncRun(f.context, f.Feeds(), asio::use_awaitable);
    benchmark::DoNotOptimize(out);
  }
}

void BM_AsyncRunAwaitable(benchmark::State& bench) {
  Fixture f;
  asio::io_context io;
  while (bench.KeepRunningBatch(kBatch)) {
    asio::co_spawn(io, AsyncLoop(f, kBatch), asio::detached);
    io.run();
    io.restart();
  }
  f.Check(bench);
}

void BM_AsyncRunFuture(benchmark::State& bench) {
  Fixture f;
  for (auto _ : bench) {
    RuntimeValueMap out = f.state.AsyncRun(f.context, f.Feeds(), asio::use_future).get();
    benchmark::DoNotOptimize(out);
  }
  f.Check(bench);
}

}  // namespace

BENCHMARK(BM_Run)->UseRealTime();
BENCHMARK(BM_TaskAwait)->UseRealTime();
BENCHMARK(BM_TaskSyncWait)->UseRealTime();
BENCHMARK(BM_AsyncRunAwaitable)->UseRealTime();
BENCHMARK(BM_AsyncRunFuture)->UseRealTime();

BENCHMARK_MAIN();
