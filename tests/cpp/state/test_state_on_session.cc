// PersistentValueState on a shared RuntimeSession (issue 11, "Compiled once, shared") and
// Run(context, feeds, output_names) ("Callers choose what comes back"): many states, one
// compiled model; the bindings validated once per session; a state holds only its values;
// only the outputs asked for come back, the bound ones are still retained and published; a
// loop that asks for the logits only appends its caches in place (0 prefix bytes per token).
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/model_io.h"
#include "core/text_parser.h"
#include "executor/runtime_session.h"
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

// present = delta + past (bound past <- present); doubled = delta * 2 (not bound).
std::shared_ptr<const ModelProto> Accumulate() {
  auto model = std::make_shared<ModelProto>(ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "accumulate (float[2] delta, float[2] past) => (float[2] present, float[2] doubled)\n"
      "<float[2] two = {2.0, 2.0}>\n"
      "{ present = Add(delta, past)  doubled = Mul(delta, two) }"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

RuntimeValueMap Past(float a, float b) {
  RuntimeValueMap initial;
  initial.emplace("past", F2("past", a, b));
  return initial;
}

RuntimeValueMap Delta(float a, float b) {
  RuntimeValueMap feeds;
  feeds.emplace("delta", F2("delta", a, b));
  return feeds;
}

// One Attention layer with bound K/V caches: y, present_key, present_value.
std::shared_ptr<const ModelProto> Decode() {
  auto model = std::make_shared<ModelProto>(ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 23]>\n"
      "decode (float[1,2,1,2] q, float[1,1,S,2] k, float[1,1,S,3] v, float[1,1,P,2] past_key,"
      " float[1,1,P,3] past_value) => (float[1,2,1,3] y, float[1,1,T,2] present_key,"
      " float[1,1,T,3] present_value)\n"
      "{ y, present_key, present_value = Attention(q, k, v, , past_key, past_value) }"));
  for (const char* name : {"key", "value"}) {
    auto* binding = model->mutable_graph()->add_persistent_bindings();
    binding->set_input_name(std::string("past_") + name);
    binding->set_output_name(std::string("present_") + name);
  }
  return model;
}

RuntimeValueMap EmptyCaches() {
  RuntimeValueMap initial;
  initial.emplace("past_key", RuntimeValue(Tensor("past_key", DataType::kFloat, {1, 1, 0, 2})));
  initial.emplace("past_value", RuntimeValue(Tensor("past_value", DataType::kFloat, {1, 1, 0, 3})));
  return initial;
}

Tensor Filled(const std::string& name, Shape shape, float start) {
  std::vector<float> values(static_cast<size_t>(ShapeNumel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + 0.25f * static_cast<float>(i);
  return Tensor::FromFloat(name, std::move(shape), std::move(values));
}

RuntimeValueMap Token(int t) {
  const float base = static_cast<float>(t);
  RuntimeValueMap feeds;
  feeds.emplace("q", RuntimeValue(Filled("q", {1, 2, 1, 2}, 0.1f * base)));
  feeds.emplace("k", RuntimeValue(Filled("k", {1, 1, 1, 2}, base)));
  feeds.emplace("v", RuntimeValue(Filled("v", {1, 1, 1, 3}, 10.0f + base)));
  return feeds;
}

size_t PrefixCopied(const RuntimeContext& context) {
  size_t bytes = 0;
  for (const auto& e : context.events())
    if (e.action == RuntimeEventAction::kPersistentStorage) bytes += e.storage_prefix_copied_bytes;
  context.ClearEvents();
  return bytes;
}

RuntimeContext EventContext() {
  RuntimeContextOptions options;
  options.events_enabled = true;
  return RuntimeContext(KernelContext(23), options);
}

}  // namespace

TEST_CASE("States built on one shared session run like states built on the model") {
  auto model = Accumulate();
  auto session = std::make_shared<const RuntimeSession>(model);
  PersistentValueState a(session, Past(0, 0));
  PersistentValueState b(session, Past(10, 20));
  PersistentValueState alone(model, Past(0, 0));
  RuntimeContext context;
  for (int i = 0; i < 3; ++i) {
    auto out_a = a.Run(context, Delta(1, 2));
    auto out_b = b.Run(context, Delta(1, 2));
    auto out_alone = alone.Run(context, Delta(1, 2));
    CHECK(Read(out_a.at("present")) == Read(out_alone.at("present")));
    CHECK(Read(out_a.at("doubled")) == std::vector<float>{2, 4});
    CHECK(Read(out_b.at("present")) == std::vector<float>{10.f + (i + 1), 20.f + 2.f * (i + 1)});
  }
  // Compiled once: both states use the session's one plan; neither built its own session.
  CHECK(session->plan_count() == 1);
  CHECK(a.session() == session);
  CHECK(b.session() == session);
  CHECK(alone.session() != session);
  CHECK(&a.model() == model.get());
  CHECK(a.options() == session->options());
}

TEST_CASE("The bindings are validated once per session and still rejected on a session") {
  auto session = std::make_shared<const RuntimeSession>(Accumulate());
  PersistentValueState a(session, Past(0, 0));
  PersistentValueState b(session, Past(0, 0));
  // One set of resolved declarations (and one validator) for every state of the session.
  CHECK(&a.validator() == &b.validator());
  CHECK(&a.bindings() == &b.bindings());
  REQUIRE(a.bindings().size() == 1);
  CHECK(a.bindings()[0].input_name == "past");
  CHECK(a.feed_names() == std::vector<std::string>{"delta"});

  // A model whose bindings break the rules fails on a session as on the model, each time.
  auto bad = std::make_shared<ModelProto>(*Accumulate());
  bad->mutable_graph()->mutable_persistent_bindings(0)->set_output_name("missing");
  auto bad_session = std::make_shared<const RuntimeSession>(bad);
  for (int i = 0; i < 2; ++i)
    ExpectError([&] { PersistentValueState s(bad_session, Past(0, 0)); }, ErrorCode::kInvalidModel,
                "missing");
  ExpectError([&] { PersistentValueState s(bad, Past(0, 0)); }, ErrorCode::kInvalidModel,
              "missing");
  // Initial values are still checked per state.
  ExpectError([&] { PersistentValueState s(session, RuntimeValueMap{}); },
              ErrorCode::kInvalidArgument, "missing initial value for persistent input 'past'");
  ExpectError([&] { PersistentValueState s(std::shared_ptr<const RuntimeSession>(), Past(0, 0)); },
              ErrorCode::kInvalidArgument, "null session");
}

TEST_CASE("A state on a shared session holds only its values: closing it closes nothing else") {
  auto model = Accumulate();
  std::weak_ptr<const ModelProto> watch = model;
  auto session = std::make_shared<const RuntimeSession>(model);
  model.reset();
  RuntimeContext context;
  auto a = std::make_unique<PersistentValueState>(session, Past(0, 0));
  PersistentValueState b(session, Past(5, 5));
  a->Run(context, Delta(1, 1));
  const long holders = session.use_count();
  a->Close();
  CHECK(session.use_count() == holders - 1);  // the state let go of its session handle
  a.reset();
  CHECK(Read(b.Run(context, Delta(1, 1)).at("present")) == std::vector<float>{6, 6});
  PersistentValueState c(session, Past(0, 0));  // more states on the same compiled model
  CHECK(Read(c.Run(context, Delta(2, 2)).at("present")) == std::vector<float>{2, 2});
  CHECK(session->plan_count() == 1);
  CHECK_FALSE(watch.expired());  // the session keeps the model alive for its states
}

TEST_CASE("Construction on a shared session never serializes the model") {
  auto session = std::make_shared<const RuntimeSession>(Accumulate());
  RuntimeContext context;
  const uint64_t before = ModelSerializationCount();
  for (int i = 0; i < 4; ++i) {
    PersistentValueState state(session, Past(0, 0));
    state.Run(context, Delta(1, 1));
  }
  CHECK(ModelSerializationCount() == before);
}

TEST_CASE("Many states on one session run concurrently from several threads") {
  auto session = std::make_shared<const RuntimeSession>(Accumulate());
  constexpr int kThreads = 4, kSteps = 100;
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> finals(kThreads);
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        RuntimeContext context;  // one per thread: equivalent, so they share the plan
        PersistentValueState state(session, Past(static_cast<float>(t), 0));
        for (int s = 0; s < kSteps; ++s) state.Run(context, Delta(1, 2));
        finals[static_cast<size_t>(t)] = Read(state.Values().at("past"));
      } catch (...) {
        ++failures;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  for (int t = 0; t < kThreads; ++t)
    CHECK(finals[static_cast<size_t>(t)] ==
          std::vector<float>{static_cast<float>(t) + kSteps, 2.f * kSteps});
  CHECK(session->plan_count() == 1);
}

TEST_CASE("Run with output_names returns only those and still publishes the bound outputs") {
  PersistentValueState state(Accumulate(), Past(0, 0));
  RuntimeContext context;
  auto out = state.Run(context, Delta(1, 2), std::vector<std::string>{"doubled"});
  CHECK(out.size() == 1);
  CHECK(Read(out.at("doubled")) == std::vector<float>{2, 4});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{1, 2});  // retained anyway
  out = state.Run(context, Delta(1, 2), std::vector<std::string>{});
  CHECK(out.empty());
  CHECK(Read(state.Values().at("past")) == std::vector<float>{2, 4});
  // A bound output asked for is the retained buffer itself.
  out = state.Run(context, Delta(1, 1), std::vector<std::string>{"present", "present"});
  CHECK(out.size() == 1);
  CHECK(out.at("present").tensor().raw_data() == state.Values().at("past").tensor().raw_data());
  CHECK(Read(out.at("present")) == std::vector<float>{3, 5});
}

TEST_CASE("Unknown output names are rejected by name before anything runs") {
  PersistentValueState state(Accumulate(), Past(0, 0));
  RuntimeContext context;
  ExpectError(
      [&] {
        state.Run(context, Delta(1, 1), std::vector<std::string>{"logits", "present", "extra"});
      },
      ErrorCode::kInvalidArgument,
      {"unknown output name(s) 'extra', 'logits'", "the graph outputs are 'present', 'doubled'"});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{0, 0});  // nothing published
  CHECK(Read(state.Run(context, Delta(1, 1)).at("present")) == std::vector<float>{1, 1});
}

TEST_CASE("A loop that asks only for y appends its caches in place: 0 prefix bytes a token") {
  auto session = std::make_shared<const RuntimeSession>(Decode());
  RuntimeContext context = EventContext();
  const std::vector<std::string> wanted = {"y"};

  // The natural loop keeps the previous result in `out` while the next call runs. Asking for
  // y only, that result holds no cache: every token after the first appends in place.
  PersistentValueState lean(session, EmptyCaches());
  RuntimeValueMap out;
  std::vector<std::vector<float>> ys;
  const void* buffer = nullptr;
  for (int t = 1; t <= 8; ++t) {
    CAPTURE(t);
    out = lean.Run(context, Token(t), wanted);
    CHECK(out.size() == 1);
    ys.push_back(out.at("y").tensor().ToFloatVector());
    CHECK(PrefixCopied(context) == 0);
    const void* key = lean.Values().at("past_key").tensor().strided_data();
    if (t == 1) buffer = key;
    CHECK(key == buffer);  // the same cache buffer every token (capacity 32)
    CHECK(lean.Values().at("past_key").tensor().shape() == Shape{1, 1, t, 2});
  }

  // The same loop returning every output keeps the previous present_* alive: the spec then
  // forbids reuse, so every token copies the whole prefix into a fresh buffer. Same results.
  PersistentValueState full(session, EmptyCaches());
  RuntimeValueMap all;
  for (int t = 1; t <= 8; ++t) {
    CAPTURE(t);
    all = full.Run(context, Token(t));
    CHECK(PrefixCopied(context) == static_cast<size_t>(4 * (t - 1) * (2 + 3)));
    CHECK(all.at("y").tensor().ToFloatVector() == ys[static_cast<size_t>(t - 1)]);
  }
}
