#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/model_io.h"
#include "core/text_parser.h"
#include "state/persistent_value_state.h"
#include "state_kernels.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using namespace state_test;
using test_util::ExpectError;

namespace {

RuntimeValue F2(const char* name, float a, float b) {
  return RuntimeValue(Tensor::FromFloat(name, {2}, {a, b}));
}

const char* kAccumulate =
    "<ir_version: 10, opset_import: [\"\" : 18]>\n"
    "accumulate (float[2] delta, float[2] past) => (float[2] present)\n"
    "{ present = Add(delta, past) }";

}  // namespace

TEST_CASE("The spec's C++ feedback loop returns [2, 2] after two calls") {
  ModelProto model = ParseModel(kAccumulate);
  auto* binding = model.mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  PersistentValueState state(model,
                             {{"past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f}))}});
  RuntimeContext context(KernelContext(18));
  auto outputs =
      state.Run(context, {{"delta", RuntimeValue(Tensor::FromFloat("delta", {2}, {1.f, 1.f}))}});
  CHECK(Read(outputs["present"]) == std::vector<float>{1.f, 1.f});
  outputs =
      state.Run(context, {{"delta", RuntimeValue(Tensor::FromFloat("delta", {2}, {1.f, 1.f}))}});
  CHECK(Read(outputs["present"]) == std::vector<float>{2.f, 2.f});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{2.f, 2.f});
  state.Reset({{"past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f}))}});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{0.f, 0.f});
  state.Close();
  CHECK(state.closed());
  // Views exported before close stay valid.
  CHECK(Read(outputs["present"]) == std::vector<float>{2.f, 2.f});
}

TEST_CASE("Retention, forwarding, publication, values, reset and close never copy payloads") {
  auto model = ChainModel(1);  // present = Step(past, delta)
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  // Initial value moved in: the retained view has the same bytes and owner.
  Tensor initial = Tensor::FromFloat("past", {2}, {5.f, 6.f});
  const void* initial_data = initial.raw_data();
  const void* initial_owner = initial.owner().get();
  RuntimeValueMap init;
  init["past"] = RuntimeValue(std::move(initial));
  PersistentValueState state(model, std::move(init));
  RuntimeValue retained = state.Values().at("past");
  CHECK(retained.tensor().raw_data() == initial_data);
  CHECK(retained.tensor().owner().get() == initial_owner);
  CHECK_FALSE(retained.tensor().writable());
  // Forwarding: the kernel reads the retained bytes in place.
  auto out1 = state.Run(context, {{"delta", F2("delta", 1, 1)}});
  REQUIRE(probe.input_data.size() == 1);
  CHECK(probe.input_data[0] == initial_data);
  // Publication: the retained value is the returned output's buffer.
  const void* present1 = out1.at("present").tensor().raw_data();
  CHECK(state.Values().at("past").tensor().raw_data() == present1);
  CHECK(state.Values().at("past").tensor().owner() == out1.at("present").tensor().owner());
  CHECK_FALSE(out1.at("present").tensor().writable());
  auto out2 = state.Run(context, {{"delta", F2("delta", 1, 1)}});
  CHECK(probe.input_data[1] == present1);
  CHECK(Read(out2.at("present")) == std::vector<float>{7.f, 8.f});
  CHECK(Read(out1.at("present")) == std::vector<float>{6.f, 7.f});  // old view unchanged
  // Reset with a shared existing tensor: RetainStorage once, then BorrowView.
  Tensor owned = Tensor::FromFloat("mine", {2}, {9.f, 9.f});
  Tensor shared = std::move(owned).RetainStorage();
  const void* shared_data = shared.raw_data();
  state.Reset({{"past", RuntimeValue(shared.BorrowView())}});
  CHECK(state.Values().at("past").tensor().raw_data() == shared_data);
  CHECK(shared.owner_use_count() == 2);  // `shared` and the retained view: no other handle
  // Close releases the state's owners; exported views keep theirs.
  RuntimeValue exported = state.Values().at("past");
  CHECK(shared.owner_use_count() == 3);
  state.Close();
  CHECK(shared.owner_use_count() == 2);
  CHECK(exported.tensor().raw_data() == shared_data);
}

TEST_CASE("A failing kernel at any node position leaves the old state readable and retryable") {
  constexpr int kNodes = 4;
  for (int position = 0; position < kNodes; ++position) {
    CAPTURE(position);
    auto model = ChainModel(kNodes);  // present = past + 3 + delta
    StepProbe probe;
    RuntimeContext context;
    RegisterStateKernels(context, probe);
    PersistentValueState state(model, {{"past", F2("past", 0, 10)}});
    state.Run(context, {{"delta", F2("delta", 1, 1)}});
    RuntimeValue before = state.Values().at("past");
    CHECK(Read(before) == std::vector<float>{4.f, 14.f});
    probe.fail_at = probe.calls.load() + position;
    ExpectError(
        [&] {
          state.Run(context, {{"delta", F2("delta", 1, 1)}});
        },
        ErrorCode::kRuntime, {"injected failure", "Step"});
    RuntimeValue after = state.Values().at("past");
    CHECK(after.tensor().raw_data() == before.tensor().raw_data());
    CHECK(Read(after) == std::vector<float>{4.f, 14.f});
    auto out = state.Run(context, {{"delta", F2("delta", 1, 1)}});
    CHECK(Read(out.at("present")) == std::vector<float>{8.f, 18.f});
    CHECK(Read(state.Values().at("past")) == std::vector<float>{8.f, 18.f});
  }
}

TEST_CASE("An output that breaks its declaration is rejected before publication") {
  auto model = Parse(
      "<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>\n"
      "g (float[2] past) => (float[2] present) { present = test.WrongShape(past) }");
  Bind(*model, "past", "present");
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  PersistentValueState state(model, {{"past", F2("past", 3, 4)}});
  ExpectError([&] { state.Run(context, {}); }, ErrorCode::kInvalidArgument,
              {"'present'", "[1]", "[2]"});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{3.f, 4.f});
}

TEST_CASE("A cancelled completion rejects the call and leaves the state unchanged") {
  auto model = ChainModel(2);
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  TaskCompletion completion;
  completion.Cancel("request no longer needed");
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("delta", 1, 1)}}, &completion);
      },
      ErrorCode::kCancelled, {"request no longer needed"});
  CHECK(probe.calls.load() == 0);
  CHECK(Read(state.Values().at("past")) == std::vector<float>{0.f, 0.f});

  TaskCompletion ok;
  state.Run(context, {{"delta", F2("delta", 1, 1)}}, &ok);
  CHECK(ok.state() == TaskCompletion::State::kCompleted);
  ExpectError([&] { ok.Cancel("late"); }, ErrorCode::kFailedPrecondition, {"completed"});
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("delta", 1, 1)}}, &ok);
      },
      ErrorCode::kFailedPrecondition, {"single-use"});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{2.f, 2.f});
}

TEST_CASE("A cancel during the last kernel wins the publication race and publishes nothing") {
  auto model = ChainModel(3);
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  TaskCompletion completion;
  // The cancel arrives while the last node runs: kernels finish, publication loses.
  probe.hook = [&](const std::string& node) {
    (void)node;
    if (probe.calls.load() == 3) completion.Cancel("stop now");
  };
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("delta", 1, 1)}}, &completion);
      },
      ErrorCode::kCancelled, {"stop now"});
  CHECK(probe.calls.load() == 3);
  CHECK(Read(state.Values().at("past")) == std::vector<float>{0.f, 0.f});
  probe.hook = nullptr;
  auto out = state.Run(context, {{"delta", F2("delta", 1, 1)}});
  CHECK(Read(out.at("present")) == std::vector<float>{3.f, 3.f});
}

TEST_CASE("Concurrent cancellation: the state is always exactly the old or the new value") {
  auto model = ChainModel(3);  // +3 per successful call with delta = 1
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  constexpr int kRuns = 3000;
  int published = 0, cancelled = 0;
  for (int i = 0; i < kRuns; ++i) {
    TaskCompletion completion;
    std::atomic<bool> go{false};
    // Cancel after 0..3 of this run's kernels started, so every phase of a call (before
    // attach, between nodes, racing publication) is hit.
    const int threshold = probe.calls.load() + i % 4;
    std::atomic<bool> ready{false};
    std::thread canceller([&] {
      ready.store(true, std::memory_order_release);
      while (!go.load(std::memory_order_acquire) || probe.calls.load() < threshold) {
      }
      try {
        completion.Cancel("race");
      } catch (const Error&) {
        // Lost the race: the call already published.
      }
    });
    while (!ready.load(std::memory_order_acquire)) {
    }
    go.store(true, std::memory_order_release);
    bool ok = true;
    try {
      state.Run(context, {{"delta", F2("delta", 1, 1)}}, &completion);
    } catch (const Error& e) {
      REQUIRE(e.code() == ErrorCode::kCancelled);
      ok = false;
    }
    canceller.join();
    REQUIRE(ok == (completion.state() == TaskCompletion::State::kCompleted));
    (ok ? published : cancelled)++;
    const auto now = Read(state.Values().at("past"));
    const float expected = 3.f * static_cast<float>(published);
    REQUIRE(now == std::vector<float>{expected, expected});
  }
  CHECK(published + cancelled == kRuns);
  MESSAGE("published " << published << ", cancelled " << cancelled);
}

TEST_CASE("Overlapping calls, resets and closes on one state are detected") {
  auto model = ChainModel(1);
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, release = false;
  probe.hook = [&](const std::string&) {
    std::unique_lock<std::mutex> lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  std::thread runner([&] { state.Run(context, {{"delta", F2("delta", 1, 1)}}); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("delta", 1, 1)}});
      },
      ErrorCode::kFailedPrecondition, {"must not overlap"});
  ExpectError(
      [&] {
        state.Reset({{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kFailedPrecondition, {"reset", "must not overlap"});
  ExpectError([&] { state.Close(); }, ErrorCode::kFailedPrecondition,
              {"close", "must not overlap"});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{0.f, 0.f});  // reads are fine
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  runner.join();
  probe.hook = nullptr;
  CHECK(Read(state.Values().at("past")) == std::vector<float>{1.f, 1.f});
}

TEST_CASE("Construction and calls reject bad names, each naming the key") {
  auto model = ChainModel(1);
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  ExpectError([&] { PersistentValueState(model, {}); }, ErrorCode::kInvalidArgument,
              {"missing initial value", "'past'"});
  ExpectError(
      [&] {
        PersistentValueState(model, {{"past", F2("past", 0, 0)}, {"cache", F2("c", 0, 0)}});
      },
      ErrorCode::kInvalidArgument, {"unknown initial value name 'cache'"});
  ExpectError(
      [&] {
        PersistentValueState(model, {{"past", F2("past", 0, 0)}, {"delta", F2("d", 0, 0)}});
      },
      ErrorCode::kInvalidArgument, {"'delta'", "not persistent"});
  ExpectError(
      [&] {
        PersistentValueState(model,
                             {{"past", RuntimeValue(Tensor::FromFloat("p", {3}, {0, 0, 0}))}});
      },
      ErrorCode::kInvalidArgument, {"'past'", "[3]"});
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("d", 1, 1)}, {"past", F2("p", 1, 1)}});
      },
      ErrorCode::kInvalidArgument, {"'past'", "override"});
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("d", 1, 1)}, {"request.cache", F2("p", 1, 1)}});
      },
      ErrorCode::kInvalidArgument, {"'request.cache'", "unknown"});
  ExpectError([&] { state.Run(context, {}); }, ErrorCode::kInvalidArgument, {"'delta'"});
  ExpectError([&] { state.Reset({}); }, ErrorCode::kInvalidArgument, {"'past'"});
  CHECK(probe.calls.load() == 0);
  state.Close();
  state.Close();  // idempotent
  ExpectError(
      [&] {
        state.Run(context, {{"delta", F2("d", 1, 1)}});
      },
      ErrorCode::kFailedPrecondition, {"closed"});
  ExpectError(
      [&] {
        state.Reset({{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kFailedPrecondition, {"closed"});
  ExpectError([&] { state.Values(); }, ErrorCode::kFailedPrecondition, {"closed"});
  ExpectError([&] { state.model(); }, ErrorCode::kFailedPrecondition, {"closed"});
}

TEST_CASE("Binding declarations are checked: duplicates, dangling names, types, subgraphs") {
  auto dup_input = ChainModel(1);
  Bind(*dup_input, "past", "present");
  ExpectError(
      [&] {
        PersistentValueState(dup_input, {{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kInvalidModel, {"duplicate binding input name 'past'"});
  auto dangling = ChainModel(1);
  Bind(*dangling, "past2", "present2");
  ExpectError(
      [&] {
        PersistentValueState(dangling, {{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kInvalidModel, {"unknown input name 'past2'"});
  auto strings = Parse(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (string[1] past) => (string[1] present) { present = Identity(past) }");
  Bind(*strings, "past", "present");
  ExpectError([&] { PersistentValueState(strings, {}); }, ErrorCode::kInvalidModel,
              {"'past'", "string"});
  auto mismatch = Parse(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "g (float[2] past) => (float[3] present) { present = Identity(past) }");
  Bind(*mismatch, "past", "present");
  ExpectError(
      [&] {
        PersistentValueState(mismatch, {{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kInvalidModel, {"'past' <- output 'present'", "dimension 0"});
  auto twice = Parse(
      "<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>\n"
      "g (float[2] past) => (float[2] present) { t = test.Step(past)\n"
      "present = test.Step(t, past) }");
  Bind(*twice, "past", "present");
  ExpectError(
      [&] {
        PersistentValueState(twice, {{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kInvalidModel, {"'past'", "2"});
  auto nested = ChainModel(1);
  auto* node = nested->mutable_graph()->add_node();
  node->set_op_type("If");
  node->add_input("delta");  // (the schema's condition; the binding is refused first)
  node->add_output("unused");
  auto* attr = node->add_attribute();
  attr->set_name("then_branch");
  attr->mutable_g()->set_name("then");
  auto* inner = attr->mutable_g()->add_persistent_bindings();
  inner->set_input_name("a");
  inner->set_output_name("b");
  ExpectError(
      [&] {
        PersistentValueState(nested, {{"past", F2("past", 0, 0)}});
      },
      ErrorCode::kInvalidModel, {"'then'", "only allowed in the root graph"});
}

TEST_CASE("The state keeps the model and the supplied contexts alive") {
  auto model = ChainModel(1);
  std::weak_ptr<ModelProto> weak_model = model;
  StepProbe probe;
  std::unique_ptr<PersistentValueState> state;
  {
    state = std::make_unique<PersistentValueState>(std::shared_ptr<const ModelProto>(model),
                                                   RuntimeValueMap{{"past", F2("past", 0, 0)}});
    model.reset();
    CHECK_FALSE(weak_model.expired());
    auto context = std::make_unique<RuntimeContext>();
    RegisterStateKernels(*context, probe);
    state->Run(*context, {{"delta", F2("d", 1, 1)}});
    state->Run(*context, {{"delta", F2("d", 1, 1)}});
    CHECK(state->retained_context_count() == 1);
  }
  // The caller's context is gone; its configuration (custom kernels) lives on in the state.
  RuntimeContext other;
  RegisterStateKernels(other, probe);
  state->Run(other, {{"delta", F2("d", 1, 1)}});
  CHECK(state->retained_context_count() == 2);
  CHECK(Read(state->Values().at("past")) == std::vector<float>{3.f, 3.f});
  state->Close();
  CHECK(weak_model.expired());
}

TEST_CASE("Construction, runs, reset and close never serialize the model") {
  auto model = ChainModel(3);
  StepProbe probe;
  RuntimeContext context;
  RegisterStateKernels(context, probe);
  const uint64_t before = ModelSerializationCount();
  PersistentValueState state(model, {{"past", F2("past", 0, 0)}});
  for (int i = 0; i < 5; ++i) state.Run(context, {{"delta", F2("d", 1, 1)}});
  state.Reset({{"past", F2("past", 0, 0)}});
  state.Close();
  CHECK(ModelSerializationCount() == before);
}

TEST_CASE("Options are copied at construction") {
  auto model = ChainModel(1);
  RuntimeSessionOptions options;
  options.persistent_tensor_initial_capacity = 64;
  PersistentValueState first(model, {{"past", F2("past", 0, 0)}}, options);
  options.persistent_tensor_initial_capacity = 0;
  PersistentValueState second(model, {{"past", F2("past", 0, 0)}}, options);
  CHECK(first.options().persistent_tensor_initial_capacity == 64);
  CHECK(second.options().persistent_tensor_initial_capacity == 0);
}

TEST_CASE("Independent states run concurrently from several threads") {
  auto model = ChainModel(2);
  constexpr int kThreads = 4, kSteps = 200;
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> finals(kThreads);
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        StepProbe probe;
        RuntimeContext context;
        RegisterStateKernels(context, probe);
        PersistentValueState state(model, {{"past", F2("past", static_cast<float>(t), 0)}});
        for (int s = 0; s < kSteps; ++s) state.Run(context, {{"delta", F2("d", 1, 2)}});
        finals[static_cast<size_t>(t)] = Read(state.Values().at("past"));
      } catch (...) {
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  for (int t = 0; t < kThreads; ++t)
    CHECK(finals[static_cast<size_t>(t)] ==
          std::vector<float>{static_cast<float>(t) + 2.f * kSteps, 3.f * kSteps});
}
