// Generate, GenerateTask and the RequestScheduler compile a model once per model object
// (SessionCache::Default()): repeated calls and concurrent requests share one plan, one set
// of kernels and one copy of the packed weights (counted with PackedWeightBytes); a session
// can also be passed directly; generation asks its state for the logits only.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/model_io.h"
#include "core/text_parser.h"
#include "executor/session_cache.h"
#include "onnx_light.pb.h"
#include "ops/math/constant_weight.h"
#include "state/generate.h"
#include "state/request_scheduler.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

constexpr int64_t kVocab = 64, kWidth = 16;
// The packed copy of w [kWidth, kVocab] that MatMul keeps from its second call on.
constexpr size_t kPackedBytes = 4 * kWidth * kVocab;

// logits = MatMul(table[input_ids], w), with the token history in a bound cache `past`.
// w is a constant B wide enough to be packed.
std::shared_ptr<const ModelProto> PackedModel() {
  auto model = std::make_shared<ModelProto>(core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>"
      "packed (int64[B, S] input_ids, float[B, P] past) => (float[B, S, 64] logits,"
      " float[B, Q] present)"
      "{ f = Cast<to = 1>(input_ids)  present = Concat<axis = 1>(past, f)"
      "  g = Gather<axis = 0>(table, input_ids)  logits = MatMul(g, w) }"));
  auto add = [&](const char* name, int64_t rows, int64_t cols, int seed) {
    auto* init = model->mutable_graph()->add_initializer();
    init->set_name(name);
    init->set_data_type(TensorProto::FLOAT);
    init->add_dims(rows);
    init->add_dims(cols);
    for (int64_t i = 0; i < rows * cols; ++i)
      init->add_float_data(static_cast<float>((i * 37 + seed) % 101) / 101.0f - 0.5f);
  };
  add("table", kVocab, kWidth, 3);
  add("w", kWidth, kVocab, 7);
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

RuntimeValueMap Feeds(std::vector<int64_t> prompt) {
  const int64_t len = static_cast<int64_t>(prompt.size());
  RuntimeValueMap feeds;
  feeds.emplace("input_ids",
                RuntimeValue(Tensor::FromInt64("input_ids", {1, len}, std::move(prompt))));
  feeds.emplace("past", RuntimeValue(Tensor("past", core::DataType::kFloat, {1, 0})));
  return feeds;
}

GenerationOptions Options(int64_t tokens) {
  GenerationOptions options;
  options.max_new_tokens = tokens;
  return options;
}

const std::vector<std::vector<int64_t>> kPrompts = {{1},    {2, 3}, {4, 4, 4}, {7},
                                                    {0, 5}, {6},    {3, 1, 2}, {5, 7}};

}  // namespace

TEST_CASE("repeated Generate calls on one model object compile it once") {
  SessionCache::Default().Clear();
  RuntimeContext context;
  auto model = PackedModel();
  const size_t before = ops::math::PackedWeightBytes();
  const uint64_t serialized = core::ModelSerializationCount();
  const auto first = Generate(model, context, Feeds({1, 2}), Options(4)).ToInt64Vector();
  CHECK(SessionCache::Default().size() == 1);
  auto session = SessionCache::Default().Get(model);
  CHECK(session->plan_count() == 1);
  CHECK(ops::math::PackedWeightBytes() == before + kPackedBytes);  // kept by the cached plan
  for (int i = 0; i < 3; ++i) {
    RuntimeContext fresh;  // a new equivalent context per call does not re-plan either
    CHECK(Generate(model, fresh, Feeds({1, 2}), Options(4)).ToInt64Vector() == first);
  }
  CHECK(SessionCache::Default().Get(model) == session);
  CHECK(session->plan_count() == 1);
  CHECK(ops::math::PackedWeightBytes() == before + kPackedBytes);  // still one copy
  CHECK(core::ModelSerializationCount() == serialized);

  // Another model object is another session (even when equal), with its own pack.
  auto other = PackedModel();
  CHECK(Generate(other, context, Feeds({1, 2}), Options(4)).ToInt64Vector() == first);
  CHECK(ops::math::PackedWeightBytes() == before + 2 * kPackedBytes);
  // A model its caller dropped goes with the next lookup, packs and all.
  other.reset();
  session.reset();
  SessionCache::Default().Sweep();
  CHECK(SessionCache::Default().size() == 1);
  CHECK(ops::math::PackedWeightBytes() == before + kPackedBytes);
  model.reset();
  SessionCache::Default().Sweep();
  CHECK(SessionCache::Default().size() == 0);
  CHECK(ops::math::PackedWeightBytes() == before);
}

TEST_CASE("Generate and GenerateTask take a session directly") {
  RuntimeContext context;
  auto session = std::make_shared<const RuntimeSession>(PackedModel());
  const auto expected = Generate(PackedModel(), context, Feeds({4, 5}), Options(5));
  GenerationStats stats;
  const Tensor tokens =
      Generate(session, context, Feeds({4, 5}), Options(5), nullptr, nullptr, &stats);
  CHECK(tokens.ToInt64Vector() == expected.ToInt64Vector());
  CHECK(stats.used_persistent_state);
  CHECK(stats.steps == 5);
  CHECK(SyncWait(GenerateTask(session, context, Feeds({4, 5}), Options(5))).ToInt64Vector() ==
        expected.ToInt64Vector());
  CHECK(session->plan_count() == 1);
}

TEST_CASE("eight scheduled requests of one model hold one copy of the packed weights") {
  SessionCache::Default().Clear();
  RuntimeContext context;
  auto model = PackedModel();
  std::vector<std::vector<int64_t>> expected;
  {
    auto reference = PackedModel();  // tokens from a separate model object, then dropped
    for (const auto& prompt : kPrompts)
      expected.push_back(Generate(reference, context, Feeds(prompt), Options(6)).ToInt64Vector());
  }
  SessionCache::Default().Clear();
  const size_t before = ops::math::PackedWeightBytes();

  auto run_eight = [&](bool one_model) {
    RequestScheduler scheduler(context, {.max_in_flight = 8});
    std::vector<std::shared_ptr<const ModelProto>> models;
    std::vector<RequestHandle> handles;
    for (const auto& prompt : kPrompts) {
      GenerationRequest request;
      request.model = one_model ? model : PackedModel();
      models.push_back(request.model);
      request.feeds = Feeds(prompt);
      request.options = Options(6);
      handles.push_back(scheduler.Submit(std::move(request)));
    }
    for (size_t i = 0; i < handles.size(); ++i)
      CHECK(handles[i].Get().tokens.ToInt64Vector() == expected[i]);
    scheduler.WaitIdle();
    return ops::math::PackedWeightBytes() - before;  // while the models are held
  };

  // One model object: one cached session, one plan, one packed copy for all eight.
  CHECK(run_eight(true) == kPackedBytes);
  CHECK(SessionCache::Default().size() == 1);
  CHECK(SessionCache::Default().Get(model)->plan_count() == 1);
  // Eight model objects: eight sessions, eight copies (what every request used to pay).
  SessionCache::Default().set_capacity(16);
  CHECK(run_eight(false) == kPackedBytes + 8 * kPackedBytes);
  SessionCache::Default().set_capacity(4);
  SessionCache::Default().Clear();  // no one holds a session any more: every pack goes
  CHECK(ops::math::PackedWeightBytes() == before);
}

TEST_CASE("a scheduled request may carry its session") {
  RuntimeContext context;
  auto session = std::make_shared<const RuntimeSession>(PackedModel());
  RequestScheduler scheduler(context);
  std::vector<RequestHandle> handles;
  for (const auto& prompt : kPrompts) {
    GenerationRequest request;
    request.session = session;
    request.feeds = Feeds(prompt);
    request.options = Options(3);
    handles.push_back(scheduler.Submit(std::move(request)));
  }
  for (size_t i = 0; i < handles.size(); ++i)
    CHECK(handles[i].Get().tokens.ToInt64Vector() ==
          Generate(session, context, Feeds(kPrompts[i]), Options(3)).ToInt64Vector());
  CHECK(session->plan_count() == 1);
}
