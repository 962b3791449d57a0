// Generate() on small models whose next token is (token + 1) mod 6: exact tokens, EOS and
// padding, positions and masks, one token per step with bindings, full prefix without.
#include <doctest/doctest.h>

#include <mutex>

#include "core/text_parser.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"
#include "state/generate.h"
#include "state/task_completion.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

// logits[b, s, :] = one-hot((ids[b, s] + 1) mod 6) via Gather on a shifted identity.
const char* kTable =
    "float[6, 6] table = {0, 1, 0, 0, 0, 0,  0, 0, 1, 0, 0, 0,  0, 0, 0, 1, 0, 0,"
    "                     0, 0, 0, 0, 1, 0,  0, 0, 0, 0, 0, 1,  1, 0, 0, 0, 0, 0}";

std::shared_ptr<const ModelProto> CachedCounter() {
  auto model = std::make_shared<ModelProto>(core::ParseModel(
      std::string(
          "<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>"
          "counter (int64[B, S] input_ids, int64[B, T] attention_mask, int64[B, S] position_ids,"
          " float[B, P] past) => (float[B, S, 6] logits, float[B, Q] present) <") +
      kTable +
      "> { ids = test.Record(input_ids) pos = test.RecordPositions(position_ids)"
      " mask = test.RecordMask(attention_mask)"
      " logits = Gather<axis = 0>(table, ids)  f = Cast<to = 1>(ids)"
      " present = Concat<axis = 1>(past, f) }"));
  auto* b = model->mutable_graph()->add_persistent_bindings();
  b->set_input_name("past");
  b->set_output_name("present");
  return model;
}

std::shared_ptr<const ModelProto> PrefixCounter() {
  return std::make_shared<ModelProto>(core::ParseModel(
      std::string("<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>"
                  "counter (int64[B, S] input_ids) => (float[B, S, 6] logits) <") +
      kTable + "> { ids = test.Record(input_ids) logits = Gather<axis = 0>(table, ids) }"));
}

// Identity that records the shapes (and values) it saw.
struct Recorder {
  std::mutex mutex;
  std::vector<Shape> shapes;
  std::vector<std::vector<int64_t>> values;
};

class RecordKernel final : public KernelBase {
 public:
  explicit RecordKernel(Recorder& r) : recorder_(r) {}
  void Compute(KernelCall& call) const override {
    const Tensor& t = call.input(0);
    {
      std::lock_guard<std::mutex> lock(recorder_.mutex);
      recorder_.shapes.push_back(t.shape());
      recorder_.values.push_back(t.ToInt64Vector());
    }
    call.SetOutputValue(0, call.input_value(0).BorrowView());
  }

 private:
  Recorder& recorder_;
};

struct Fixture {
  Recorder ids, positions, mask;
  RuntimeContext context{KernelContext(OpsetMap{{"", 18}, {"test", 1}})};
  Fixture() {
    auto add = [&](const char* op, Recorder& r) {
      context.RegisterKernelFn("test", op, core::symbolic::Device::kCPU,
                               [&r](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                                 auto k = std::make_unique<RecordKernel>(r);
                                 k->set_node(node);
                                 return std::unique_ptr<KernelBase>(std::move(k));
                               });
    };
    add("Record", ids);
    add("RecordPositions", positions);
    add("RecordMask", mask);
  }
};

RuntimeValueMap Feeds(std::vector<int64_t> ids, int64_t batch, bool with_cache) {
  const int64_t len = static_cast<int64_t>(ids.size()) / batch;
  RuntimeValueMap feeds;
  feeds.emplace("input_ids",
                RuntimeValue(Tensor::FromInt64("input_ids", {batch, len}, std::move(ids))));
  if (with_cache)
    feeds.emplace("past", RuntimeValue(Tensor("past", core::DataType::kFloat, {batch, 0})));
  return feeds;
}

std::vector<int64_t> Tokens(const Tensor& t) { return t.ToInt64Vector(); }

}  // namespace

TEST_CASE("greedy generation with bindings evaluates the prompt once, then one token per step") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 4;
  GenerationStats stats;
  Tensor out = Generate(CachedCounter(), f.context, Feeds({1, 2}, 1, true), options, {}, nullptr,
                        nullptr, &stats);
  CHECK(out.dtype() == core::DataType::kInt64);
  CHECK(out.shape() == Shape{1, 6});
  CHECK(Tokens(out) == std::vector<int64_t>{1, 2, 3, 4, 5, 0});
  CHECK(stats.used_persistent_state);
  REQUIRE(f.ids.shapes.size() == 4);
  CHECK(f.ids.shapes[0] == Shape{1, 2});
  for (size_t i = 1; i < 4; ++i) CHECK(f.ids.shapes[i] == Shape{1, 1});
  // Declared attention_mask and position_ids are created and advanced.
  CHECK(f.positions.values[0] == std::vector<int64_t>{0, 1});
  CHECK(f.positions.values[1] == std::vector<int64_t>{2});
  CHECK(f.positions.values[3] == std::vector<int64_t>{4});
  CHECK(f.mask.shapes[0] == Shape{1, 2});
  CHECK(f.mask.shapes[3] == Shape{1, 5});
}

TEST_CASE("without bindings the full growing prefix is evaluated, with the same tokens") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 4;
  GenerationStats stats;
  Tensor out = Generate(PrefixCounter(), f.context, Feeds({1, 2}, 1, false), options, {}, nullptr,
                        nullptr, &stats);
  CHECK(Tokens(out) == std::vector<int64_t>{1, 2, 3, 4, 5, 0});
  CHECK_FALSE(stats.used_persistent_state);
  REQUIRE(f.ids.shapes.size() == 4);
  for (int64_t i = 0; i < 4; ++i) CHECK(f.ids.shapes[static_cast<size_t>(i)] == Shape{1, 2 + i});
}

TEST_CASE("rows that emit EOS are padded and generation stops when every row has") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 10;
  options.eos_token_id = 4;
  options.pad_token_id = 5;
  Tensor out = Generate(CachedCounter(), f.context, Feeds({2, 0}, 2, true), options);
  // Row 0: 2 -> 3 -> 4 (EOS) then padded; row 1: 0 -> 1 2 3 4 (EOS after 4 steps).
  CHECK(out.shape() == Shape{2, 5});
  CHECK(Tokens(out) == std::vector<int64_t>{2, 3, 4, 5, 5, 0, 1, 2, 3, 4});
}

TEST_CASE("a left-padded prompt counts positions over its mask") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 1;
  RuntimeValueMap feeds = Feeds({0, 3, 1, 2}, 2, true);
  feeds.emplace("attention_mask",
                RuntimeValue(Tensor::FromInt64("attention_mask", {2, 2}, {0, 1, 1, 1})));
  Tensor out = Generate(CachedCounter(), f.context, std::move(feeds), options);
  CHECK(Tokens(out) == std::vector<int64_t>{0, 3, 4, 1, 2, 3});
  CHECK(f.positions.values[0] == std::vector<int64_t>{1, 0, 0, 1});
}

TEST_CASE("the callback streams each step and can stop generation early") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 10;
  std::vector<int64_t> streamed;
  Tensor out = Generate(CachedCounter(), f.context, Feeds({0}, 1, true), options, {},
                        [&](int64_t step, const std::vector<int64_t>& tokens) {
                          streamed.push_back(tokens[0]);
                          return step < 2;
                        });
  CHECK(streamed == std::vector<int64_t>{1, 2, 3});
  CHECK(Tokens(out) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("a cancelled completion stops generation between tokens") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 10;
  TaskCompletion cancel;
  Tensor out = Generate(
      CachedCounter(), f.context, Feeds({0}, 1, true), options, {},
      [&](int64_t step, const std::vector<int64_t>&) {
        if (step == 1) cancel.Cancel("client went away");
        return true;
      },
      &cancel);
  CHECK(Tokens(out) == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("seeded sampling is repeatable and the caller's feeds are unchanged") {
  Fixture f;
  GenerationOptions options;
  options.max_new_tokens = 6;
  options.temperature = 5.0f;
  options.seed = 42;
  RuntimeValueMap feeds = Feeds({1}, 1, true);
  const void* ids_data = feeds.at("input_ids").tensor().raw_data();
  Tensor a = Generate(CachedCounter(), f.context, feeds, options);
  Tensor b = Generate(CachedCounter(), f.context, feeds, options);
  CHECK(Tokens(a) == Tokens(b));
  CHECK(feeds.at("input_ids").tensor().raw_data() == ids_data);
  CHECK(feeds.at("input_ids").tensor().ToInt64Vector() == std::vector<int64_t>{1});
}

TEST_CASE("generation errors name the input at fault") {
  Fixture f;
  GenerationOptions options;
  CHECK_THROWS_WITH(Generate(CachedCounter(), f.context, RuntimeValueMap{}, options),
                    "generate: feeds must contain the token input 'input_ids'");
  RuntimeValueMap feeds = Feeds({1}, 1, false);
  feeds.emplace("past", RuntimeValue(Tensor::FromFloat("past", {1, 1}, {0.f})));
  CHECK_THROWS_WITH(Generate(CachedCounter(), f.context, std::move(feeds), options),
                    doctest::Contains("initial cache 'past' must represent an empty prefix"));
  RuntimeValueMap right_padded = Feeds({1, 2}, 1, true);
  right_padded.emplace("attention_mask",
                       RuntimeValue(Tensor::FromInt64("attention_mask", {1, 2}, {1, 0})));
  CHECK_THROWS_WITH(Generate(CachedCounter(), f.context, std::move(right_padded), options),
                    doctest::Contains("prompts must be unpadded or left-padded"));
}
