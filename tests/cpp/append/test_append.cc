// Append capacity of persistent tensors (spec "Contiguous CPU Attention feedback" and "Opt-in
// storage auditing through runtime events"): every "Reuse is deliberately conservative"
// rule, the byte formulas, pointer identity of the in-place appends.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "state/persistent_value_state.h"
#include "state/task_completion.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using test_util::ExpectError;

namespace {

struct Totals {
  size_t events = 0, allocations = 0, allocated = 0, prefix = 0, append = 0, reuse = 0;
};

// Sums the kPersistentStorage reports in the context's log, then clears it.
Totals TakeStorage(const RuntimeContext& context) {
  Totals t;
  for (const auto& e : context.events()) {
    if (e.action != RuntimeEventAction::kPersistentStorage) continue;
    ++t.events;
    t.allocations += e.storage_allocations;
    t.allocated += e.storage_allocated_bytes;
    t.prefix += e.storage_prefix_copied_bytes;
    t.append += e.storage_append_copied_bytes;
    t.reuse += e.storage_reuse_count;
  }
  context.ClearEvents();
  return t;
}

void CheckTotals(const Totals& t, size_t allocations, size_t allocated, size_t prefix,
                 size_t append, size_t reuse) {
  CHECK(t.allocations == allocations);
  CHECK(t.allocated == allocated);
  CHECK(t.prefix == prefix);
  CHECK(t.append == append);
  CHECK(t.reuse == reuse);
}

void Bind(ModelProto& model, const std::string& in, const std::string& out) {
  auto* b = model.mutable_graph()->add_persistent_bindings();
  b->set_input_name(in);
  b->set_output_name(out);
}

std::string Dims(int64_t b, int64_t h, const std::string& s, int64_t d) {
  return "[" + std::to_string(b) + "," + std::to_string(h) + "," + s + "," + std::to_string(d) +
         "]";
}

// y, present_key, present_value = Attention(q, k, v, , past_key, past_value), bound
// past_key <- present_key and past_value <- present_value. `tail` adds nodes after it.
std::shared_ptr<ModelProto> DecodeModel(int64_t batch, int64_t hq, int64_t hkv, int64_t dk,
                                        int64_t dv, const std::string& type = "float",
                                        const std::string& extra_inputs = "",
                                        const std::string& extra_outputs = "",
                                        const std::string& tail = "",
                                        const std::string& opsets = "") {
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 23" + opsets +
      "]>\n"
      "decode (" +
      type + Dims(batch, hq, "1", dk) + " q, " + type + Dims(batch, hkv, "S", dk) + " k, " + type +
      Dims(batch, hkv, "S", dv) + " v, " + type + Dims(batch, hkv, "P", dk) + " past_key, " + type +
      Dims(batch, hkv, "P", dv) + " past_value" + extra_inputs + ") => (" + type +
      Dims(batch, hq, "1", dv) + " y, " + type + Dims(batch, hkv, "T", dk) + " present_key, " +
      type + Dims(batch, hkv, "T", dv) + " present_value" + extra_outputs +
      ")\n{\n  y, present_key, present_value = Attention(q, k, v, , past_key, past_value)\n" +
      tail + "}";
  auto model = std::make_shared<ModelProto>(ParseModel(text));
  Bind(*model, "past_key", "present_key");
  Bind(*model, "past_value", "present_value");
  return model;
}

Tensor Filled(const std::string& name, Shape shape, float start) {
  std::vector<float> values(static_cast<size_t>(ShapeNumel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + 0.25f * static_cast<float>(i);
  return Tensor::FromFloat(name, std::move(shape), std::move(values));
}

RuntimeValueMap Initial(int64_t batch, int64_t hkv, int64_t len, int64_t dk, int64_t dv) {
  RuntimeValueMap initial;
  initial.emplace("past_key", RuntimeValue(Filled("past_key", {batch, hkv, len, dk}, -1.0f)));
  initial.emplace("past_value", RuntimeValue(Filled("past_value", {batch, hkv, len, dv}, 2.0f)));
  return initial;
}

// Token t's feeds: deterministic q/k/v rows.
RuntimeValueMap Token(int t, int64_t batch, int64_t hq, int64_t hkv, int64_t dk, int64_t dv,
                      int64_t rows = 1) {
  const float base = static_cast<float>(t);
  RuntimeValueMap feeds;
  feeds.emplace("q", RuntimeValue(Filled("q", {batch, hq, 1, dk}, 0.1f * base)));
  feeds.emplace("k", RuntimeValue(Filled("k", {batch, hkv, rows, dk}, base)));
  feeds.emplace("v", RuntimeValue(Filled("v", {batch, hkv, rows, dv}, 10.0f + base)));
  return feeds;
}

// The first element of a returned or retained tensor, dense or strided.
const void* Data(const RuntimeValueMap& values, const std::string& name) {
  return values.at(name).tensor().strided_data();
}

std::vector<float> Floats(const RuntimeValue& value) { return value.tensor().ToFloatVector(); }

RuntimeSessionOptions Capacity(size_t tokens) {
  RuntimeSessionOptions options;
  options.persistent_tensor_initial_capacity = tokens;
  return options;
}

RuntimeContext EventContext() {
  RuntimeContextOptions options;
  options.events_enabled = true;
  return RuntimeContext(KernelContext(23), options);
}

}  // namespace

TEST_CASE("Single-head decode allocates once, then copies only 4*(Dk+Dv) bytes per token") {
  const int64_t dk = 2, dv = 3;
  auto model = DecodeModel(1, 4, 1, dk, dv);
  PersistentValueState state(model, Initial(1, 1, 0, dk, dv), Capacity(4));
  PersistentValueState dense(model, Initial(1, 1, 0, dk, dv), Capacity(0));
  RuntimeContext context = EventContext();
  const void* buffer = nullptr;
  for (int t = 1; t <= 6; ++t) {
    CAPTURE(t);
    const void* key_data = nullptr;
    {
      auto out = state.Run(context, Token(t, 1, 4, 1, dk, dv));
      key_data = Data(out, "present_key");
      auto ref = dense.Run(context, Token(t, 1, 4, 1, dk, dv));
      CHECK(out.at("present_key").tensor().shape() == Shape{1, 1, t, dk});
      CHECK(Floats(out.at("y")) == Floats(ref.at("y")));
      CHECK(Floats(out.at("present_key")) == Floats(ref.at("present_key")));
      CHECK(Floats(out.at("present_value")) == Floats(ref.at("present_value")));
      // The retained value is the returned view's buffer: no state-level copy.
      CHECK(Data(state.Values(), "past_key") == key_data);
    }
    const Totals all = TakeStorage(context);
    CHECK(all.events == 6);  // 2 reservations + 2 Attention reports, 2 dense reports
    // The dense state's share of those reports: two fresh buffers with the whole prefix.
    const size_t dense_prefix = static_cast<size_t>(4 * (t - 1) * (dk + dv));
    const size_t dense_alloc = static_cast<size_t>(4 * t * (dk + dv));
    Totals reusable = all;
    reusable.allocations -= 2;
    reusable.allocated -= dense_alloc;
    reusable.prefix -= dense_prefix;
    reusable.append -= 4 * (dk + dv);
    if (t == 1) {
      CheckTotals(reusable, 2, 4 * 4 * (dk + dv), 0, 4 * (dk + dv), 0);
      buffer = key_data;
    } else if (t <= 4) {
      CheckTotals(reusable, 0, 0, 0, 4 * (dk + dv), 2);
      CHECK(key_data == buffer);  // appended in place
    } else if (t == 5) {
      // Capacity 4 exhausted: a buffer of 8 tokens each, the 4-token prefix copied once.
      CheckTotals(reusable, 2, 8 * 4 * (dk + dv), 4 * 4 * (dk + dv), 4 * (dk + dv), 0);
      CHECK(key_data != buffer);
      buffer = key_data;
    } else {
      CheckTotals(reusable, 0, 0, 0, 4 * (dk + dv), 2);
      CHECK(key_data == buffer);
    }
  }
}

TEST_CASE("Per-token storage reports match the spec's four-token table") {
  // Dk = Dv = 2, capacity 4: token 1 allocates 2 buffers of 32 bytes, then 16 bytes a token.
  auto model = DecodeModel(1, 1, 1, 2, 2);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext context = EventContext();
  for (int t = 1; t <= 4; ++t) {
    CAPTURE(t);
    { state.Run(context, Token(t, 1, 1, 1, 2, 2)); }
    const Totals totals = TakeStorage(context);
    if (t == 1)
      CheckTotals(totals, 2, 64, 0, 16, 0);
    else
      CheckTotals(totals, 0, 0, 0, 16, 2);
  }
}

TEST_CASE("A live previous output forces a fresh allocation and leaves the old view unchanged") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(8));
  RuntimeContext context = EventContext();
  { state.Run(context, Token(1, 1, 1, 1, 2, 2)); }
  auto kept = state.Run(context, Token(2, 1, 1, 1, 2, 2));  // stays alive
  CHECK(state.last_run_alias_copies().empty());             // (the first output was dropped)
  const Tensor old_key = kept.at("present_key").tensor();
  const std::vector<float> old_bytes = old_key.ToFloatVector();
  TakeStorage(context);
  auto next = state.Run(context, Token(3, 1, 1, 1, 2, 2));
  // Two new buffers of 8 tokens (8-byte rows); the 2-token prefixes copied.
  CheckTotals(TakeStorage(context), 2, 2 * 8 * 8, 2 * 2 * 8, 16, 0);
  CHECK(Data(next, "present_key") != old_key.raw_data());
  CHECK(old_key.shape() == Shape{1, 1, 2, 2});
  CHECK(old_key.ToFloatVector() == old_bytes);
  CHECK(kept.at("present_key").tensor().shape() == Shape{1, 1, 2, 2});
  // Named by the state: both caches had room for the token.
  CHECK(state.last_run_alias_copies() == std::vector<std::string>{"past_key", "past_value"});
}

TEST_CASE("A live Values() view forces a fresh allocation and keeps its bytes and shape") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(8));
  RuntimeContext context = EventContext();
  { state.Run(context, Token(1, 1, 1, 1, 2, 2)); }
  const RuntimeValueMap view = state.Values();
  const std::vector<float> before = Floats(view.at("past_value"));
  TakeStorage(context);
  { state.Run(context, Token(2, 1, 1, 1, 2, 2)); }
  CheckTotals(TakeStorage(context), 2, 2 * 8 * 8, 2 * 8, 16, 0);
  CHECK(view.at("past_value").tensor().shape() == Shape{1, 1, 1, 2});
  CHECK(Floats(view.at("past_value")) == before);
  CHECK(Data(state.Values(), "past_value") != view.at("past_value").tensor().raw_data());
  CHECK(state.last_run_alias_copies() == std::vector<std::string>{"past_key", "past_value"});
  // Once the view is gone the new buffer is reused again.
  { state.Run(context, Token(3, 1, 1, 1, 2, 2)); }
  CHECK(state.last_run_alias_copies().empty());
}

TEST_CASE("Imported buffers never grant write access: initial values and Reset imports") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  // A writable vector-backed tensor as initial value: retained read-only, never appended to.
  Tensor initial_key = Filled("past_key", {1, 1, 2, 2}, 5.0f);
  const void* initial_data = initial_key.raw_data();
  const std::vector<float> initial_bytes = initial_key.ToFloatVector();
  RuntimeValueMap initial;
  initial.emplace("past_key", RuntimeValue(initial_key));
  initial.emplace("past_value", RuntimeValue(Filled("past_value", {1, 1, 2, 2}, 1.0f)));
  PersistentValueState state(model, std::move(initial), Capacity(4));
  RuntimeContext context = EventContext();
  RuntimeValueMap returned;
  {
    returned = state.Run(context, Token(1, 1, 1, 1, 2, 2));
    CHECK(Data(returned, "present_key") != initial_data);
  }
  CHECK(initial_key.ToFloatVector() == initial_bytes);
  // First append: new certified buffers, the 2-token imported prefix copied once.
  CheckTotals(TakeStorage(context), 2, 2 * 4 * 8, 2 * 2 * 8, 16, 0);
  // Import the returned (capacity-backed) tensors through Reset: bytes retained without a
  // copy, capacity not imported.
  RuntimeValueMap again;
  again.emplace("past_key", returned.at("present_key"));
  again.emplace("past_value", returned.at("present_value"));
  const void* returned_key = Data(returned, "present_key");
  returned.clear();
  state.Reset(std::move(again));
  CHECK(Data(state.Values(), "past_key") == returned_key);
  { state.Run(context, Token(2, 1, 1, 1, 2, 2)); }
  CheckTotals(TakeStorage(context), 2, 2 * 4 * 8, 2 * 3 * 8, 16, 0);
  CHECK(Data(state.Values(), "past_key") != returned_key);
}

TEST_CASE("Capacity is copied at state construction and 0 disables reservations") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  RuntimeSessionOptions options = Capacity(0);
  PersistentValueState disabled(model, Initial(1, 1, 0, 2, 2), options);
  options.persistent_tensor_initial_capacity = 16;
  CHECK(disabled.options().persistent_tensor_initial_capacity == 0);
  RuntimeContext context = EventContext();
  for (int t = 1; t <= 3; ++t) {
    { disabled.Run(context, Token(t, 1, 1, 1, 2, 2)); }
    // Dense fallback: two result buffers, the whole prefix copied every token.
    CheckTotals(TakeStorage(context), 2, static_cast<size_t>(2 * t * 8),
                static_cast<size_t>(2 * (t - 1) * 8), 16, 0);
  }
}

TEST_CASE("Several KV heads and batches append per (batch, head) block without prefix copies") {
  const int64_t batch = 2, heads = 3, dk = 2, dv = 4;
  const size_t blocks = batch * heads;
  auto model = DecodeModel(batch, 6, heads, dk, dv);
  PersistentValueState state(model, Initial(batch, heads, 0, dk, dv), Capacity(2));
  PersistentValueState dense(model, Initial(batch, heads, 0, dk, dv), Capacity(0));
  RuntimeContext context = EventContext();
  RuntimeContext quiet;
  const void* buffer = nullptr;
  for (int t = 1; t <= 4; ++t) {
    CAPTURE(t);
    {
      auto out = state.Run(context, Token(t, batch, 6, heads, dk, dv));
      auto ref = dense.Run(quiet, Token(t, batch, 6, heads, dk, dv));
      const Tensor& key = out.at("present_key").tensor();
      CHECK(key.shape() == Shape{batch, heads, t, dk});
      // Head-major blocks of `capacity` rows: the view steps over the spare rows.
      const int64_t capacity = t <= 2 ? 2 : 4;
      CHECK(key.strides() == Shape{heads * capacity * dk, capacity * dk, dk, 1});
      // A full buffer (length == capacity) is dense again.
      CHECK(key.contiguous() == (t == capacity));
      if (t != capacity)
        ExpectError([&] { (void)key.raw_data(); }, ErrorCode::kFailedPrecondition,
                    "is a strided view");
      CHECK(Floats(out.at("y")) == Floats(ref.at("y")));
      CHECK(Floats(out.at("present_key")) == Floats(ref.at("present_key")));
      CHECK(Floats(out.at("present_value")) == Floats(ref.at("present_value")));
      if (t == 1 || t == 3) buffer = Data(out, "present_key");
      CHECK(Data(out, "present_key") == buffer);
      CHECK(Data(state.Values(), "past_key") == buffer);
    }
    const size_t append = 4 * blocks * (dk + dv);
    const Totals totals = TakeStorage(context);
    if (t == 1) {  // two buffers of 2 rows per block
      CheckTotals(totals, 2, 4 * blocks * 2 * (dk + dv), 0, append, 0);
    } else if (t == 3) {  // grown to 4 rows per block: each block's 2-row prefix copied once
      CheckTotals(totals, 2, 4 * blocks * 4 * (dk + dv), 4 * blocks * 2 * (dk + dv), append, 0);
    } else {  // only the new row of each block is written
      CheckTotals(totals, 0, 0, 0, append, 2);
    }
  }
  CHECK(state.Values().at("past_key").tensor().shape() == Shape{batch, heads, 4, dk});
}

TEST_CASE("A live strided output forces a fresh buffer and its bytes never change") {
  const int64_t batch = 1, heads = 2, dk = 2, dv = 2;
  auto model = DecodeModel(batch, 2, heads, dk, dv);
  PersistentValueState state(model, Initial(batch, heads, 0, dk, dv), Capacity(8));
  RuntimeContext context = EventContext();
  { state.Run(context, Token(1, batch, 2, heads, dk, dv)); }
  auto kept = state.Run(context, Token(2, batch, 2, heads, dk, dv));
  const std::vector<float> before = Floats(kept.at("present_key"));
  TakeStorage(context);
  auto next = state.Run(context, Token(3, batch, 2, heads, dk, dv));
  // `kept` shares the buffer: the state may not write even past its rows.
  CheckTotals(TakeStorage(context), 2, 4 * 2 * 8 * (dk + dv), 4 * 2 * 2 * (dk + dv),
              4 * 2 * (dk + dv), 0);
  CHECK(Data(next, "present_key") != Data(kept, "present_key"));
  CHECK(Floats(kept.at("present_key")) == before);
  CHECK(kept.at("present_key").tensor().shape() == Shape{batch, heads, 2, dk});
}

TEST_CASE("Kernels that do not read strides get a dense copy of a strided cache") {
  // summed = ReduceSum(present_key) and a Python-free Add read the cache through the
  // executor's dense copy; Shape and Identity see the strided view itself.
  const std::string tail =
      "  summed = ReduceSum <keepdims = 0> (present_key)\n"
      "  doubled = Add(present_key, present_key)\n"
      "  dims = Shape(present_key)\n";
  auto model = DecodeModel(1, 2, 2, 2, 2, "float", "",
                           ", float summed, float[1,2,T,2] doubled, int64[4] dims", tail);
  PersistentValueState state(model, Initial(1, 2, 0, 2, 2), Capacity(4));
  RuntimeContext context;
  for (int t = 1; t <= 3; ++t) {
    auto out = state.Run(context, Token(t, 1, 2, 2, 2, 2));
    const std::vector<float> key = Floats(out.at("present_key"));
    float sum = 0;
    std::vector<float> twice;
    for (float k : key) {
      sum += k;
      twice.push_back(2 * k);
    }
    CHECK(out.at("summed").tensor().ToFloatVector().at(0) == doctest::Approx(sum));
    CHECK(out.at("doubled").tensor().contiguous());
    CHECK(Floats(out.at("doubled")) == twice);
    CHECK(out.at("dims").tensor().ToInt64Vector() == std::vector<int64_t>{1, 2, t, 2});
  }
}

TEST_CASE("Empty appended chunks copy nothing and keep the buffer") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext context = EventContext();
  const void* buffer = nullptr;
  {
    auto out = state.Run(context, Token(1, 1, 1, 1, 2, 2));
    buffer = Data(out, "present_key");
  }
  TakeStorage(context);
  {
    auto out = state.Run(context, Token(2, 1, 1, 1, 2, 2, /*rows=*/0));
    CHECK(out.at("present_key").tensor().shape() == Shape{1, 1, 1, 2});
    CHECK(Data(out, "present_key") == buffer);
  }
  CheckTotals(TakeStorage(context), 0, 0, 0, 0, 2);
}

TEST_CASE("Zero-width value caches use the dense fallback and keep their shapes") {
  auto model = DecodeModel(1, 2, 1, 2, 0);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 0), Capacity(4));
  RuntimeContext context = EventContext();
  for (int t = 1; t <= 2; ++t) {
    auto out = state.Run(context, Token(t, 1, 2, 1, 2, 0));
    CHECK(out.at("y").tensor().shape() == Shape{1, 2, 1, 0});
    CHECK(out.at("present_value").tensor().shape() == Shape{1, 1, t, 0});
    const Totals totals = TakeStorage(context);
    // K: reservation (allocation on token 1, reuse after); V: one empty dense buffer.
    if (t == 1)
      CheckTotals(totals, 2, 4 * 8, 0, 8, 0);
    else
      CheckTotals(totals, 1, 0, 0, 8, 1);
  }
}

TEST_CASE("FLOAT16 caches append in place as 16-bit rows without converting the prefix") {
  auto model = DecodeModel(1, 2, 1, 4, 4, "float16");
  RuntimeValueMap initial;
  initial.emplace("past_key", RuntimeValue(Tensor("past_key", DataType::kFloat16, {1, 1, 0, 4})));
  initial.emplace("past_value",
                  RuntimeValue(Tensor("past_value", DataType::kFloat16, {1, 1, 0, 4})));
  PersistentValueState state(model, std::move(initial), Capacity(4));
  RuntimeContext context = EventContext();
  const void* buffer = nullptr;
  std::vector<uint16_t> bits;
  for (int t = 1; t <= 3; ++t) {
    RuntimeValueMap feeds;
    for (const char* name : {"q", "k", "v"}) {
      Tensor x(name, DataType::kFloat16, {1, std::string(name) == "q" ? 2 : 1, 1, 4});
      auto* p = x.mutable_data<uint16_t>();
      for (int i = 0; i < x.numel(); ++i) p[i] = FloatToHalf(0.5f * static_cast<float>(t + i));
      if (std::string(name) == "k") bits.insert(bits.end(), p, p + 4);
      feeds.emplace(name, RuntimeValue(std::move(x)));
    }
    const Tensor key = state.Run(context, std::move(feeds)).at("present_key").tensor();
    if (t == 1) buffer = key.raw_data();
    CHECK(key.raw_data() == buffer);
    CHECK(std::memcmp(key.raw_data(), bits.data(), bits.size() * 2) == 0);
    const Totals totals = TakeStorage(context);
    CHECK(totals.append == 2 * (4 + 4));
    CHECK(totals.prefix == 0);
  }
}

TEST_CASE("BFLOAT16 caches with several heads append each head's bits in its own block") {
  const int64_t heads = 3, d = 4;
  auto model = DecodeModel(1, heads, heads, d, d, "bfloat16");
  RuntimeValueMap initial;
  for (const char* name : {"past_key", "past_value"})
    initial.emplace(name, RuntimeValue(Tensor(name, DataType::kBFloat16, {1, heads, 0, d})));
  PersistentValueState state(model, std::move(initial), Capacity(4));
  RuntimeContext context = EventContext();
  std::vector<std::vector<uint16_t>> per_head(heads);  // expected key bits of each head
  const void* buffer = nullptr;
  for (int t = 1; t <= 3; ++t) {
    CAPTURE(t);
    RuntimeValueMap feeds;
    for (const char* name : {"q", "k", "v"}) {
      Tensor x(name, DataType::kBFloat16, {1, heads, 1, d});
      auto* p = x.mutable_data<uint16_t>();
      for (int i = 0; i < x.numel(); ++i)
        p[i] = FloatToBFloat16(0.25f * static_cast<float>(t * 7 + i));
      if (std::string(name) == "k")
        for (int64_t h = 0; h < heads; ++h)
          per_head[h].insert(per_head[h].end(), p + h * d, p + (h + 1) * d);
      feeds.emplace(name, RuntimeValue(std::move(x)));
    }
    const Tensor key = state.Run(context, std::move(feeds)).at("present_key").tensor();
    if (t == 1) buffer = key.strided_data();
    CHECK(key.strided_data() == buffer);
    CHECK(key.strides() == Shape{heads * 4 * d, 4 * d, d, 1});
    for (int64_t h = 0; h < heads; ++h)  // head h's rows start 4 rows after head h-1's
      CHECK(std::memcmp(static_cast<const uint16_t*>(key.strided_data()) + h * 4 * d,
                        per_head[h].data(), per_head[h].size() * 2) == 0);
    const Totals totals = TakeStorage(context);
    CHECK(totals.append == static_cast<size_t>(2 * heads * (d + d)));
    CHECK(totals.prefix == 0);
  }
}

TEST_CASE("A plain RuntimeSession run never reserves: the dense path reports its copies") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  RuntimeSession session(model);
  RuntimeContext context = EventContext();
  RuntimeValueMap feeds = Token(1, 1, 1, 1, 2, 2);
  const auto initial = Initial(1, 1, 3, 2, 2);
  feeds.emplace("past_key", initial.at("past_key"));
  feeds.emplace("past_value", initial.at("past_value"));
  auto out = session.Run(context, std::move(feeds));
  CHECK(out.at("present_key").tensor().shape() == Shape{1, 1, 4, 2});
  CheckTotals(TakeStorage(context), 2, 2 * 4 * 8, 2 * 3 * 8, 16, 0);
}

TEST_CASE("With events disabled nothing is recorded and appends still happen in place") {
  auto model = DecodeModel(1, 1, 1, 2, 2);
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext context(KernelContext(23));
  const void* first = nullptr;
  for (int t = 1; t <= 3; ++t) {
    auto out = state.Run(context, Token(t, 1, 1, 1, 2, 2));
    if (t == 1) first = Data(out, "present_key");
    CHECK(Data(out, "present_key") == first);
  }
  CHECK(context.events().empty());
}

TEST_CASE("A present routed through another node is not a bound pair and stays dense") {
  // present_key = Identity(Attention's key output): the Attention node does not produce the
  // bound output itself, so neither it nor Identity gets an append lease.
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 23]>\n"
      "decode (float[1,1,1,2] q, float[1,1,1,2] k, float[1,1,1,2] v, float[1,1,P,2] past_key,"
      " float[1,1,P,2] past_value) => (float[1,1,1,2] y, float[1,1,T,2] present_key,"
      " float[1,1,T,2] present_value)\n{\n"
      "  y, key_out, present_value = Attention(q, k, v, , past_key, past_value)\n"
      "  present_key = Identity(key_out)\n}";
  auto model = std::make_shared<ModelProto>(ParseModel(text));
  Bind(*model, "past_key", "present_key");
  Bind(*model, "past_value", "present_value");
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext context = EventContext();
  { state.Run(context, Token(1, 1, 1, 1, 2, 2)); }
  TakeStorage(context);
  { state.Run(context, Token(2, 1, 1, 1, 2, 2)); }
  // K: dense (1 buffer, 1-token prefix); V: in place.
  CheckTotals(TakeStorage(context), 1, 16, 8, 16, 1);
}

TEST_CASE("The plan records each binding's append site when it is built, and only direct ones") {
  // past_key <- present_key through Attention (inputs 4/5 -> outputs 1/2); past_value is
  // routed through Identity first, so no node reads past_value and writes present_value.
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 23]>\n"
      "decode (float[1,1,1,2] q, float[1,1,1,2] k, float[1,1,1,2] v, float[1,1,P,2] past_key,"
      " float[1,1,P,2] past_value) => (float[1,1,1,2] y, float[1,1,T,2] present_key,"
      " float[1,1,T,2] present_value)\n{\n"
      "  pv = Identity(past_value)\n"
      "  y, present_key, present_value = Attention(q, k, v, , past_key, pv)\n}";
  auto model = std::make_shared<ModelProto>(ParseModel(text));
  Bind(*model, "past_value", "present_value");  // binding 0
  Bind(*model, "past_key", "present_key");      // binding 1
  RuntimeSession session(model);
  RuntimeContext context;
  const GraphPlan& plan = session.plan(context);
  size_t sites = 0;
  for (const auto& node : plan.nodes()) {
    sites += node.append_sites.size();
    if (node.proto->op_type() != "Attention") continue;
    REQUIRE(node.append_sites.size() == 1);
    CHECK(node.append_sites[0].input == 4);
    CHECK(node.append_sites[0].output == 1);
    CHECK(node.append_sites[0].binding == 1);
  }
  CHECK(sites == 1);

  // The run follows the table: K appends in place, V takes the dense path.
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext events = EventContext();
  { state.Run(events, Token(1, 1, 1, 1, 2, 2)); }
  TakeStorage(events);
  { state.Run(events, Token(2, 1, 1, 1, 2, 2)); }
  CheckTotals(TakeStorage(events), 1, 16, 8, 16, 1);
}

TEST_CASE("Attention inside a model-local function gets no append permission") {
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 23, \"local\" : 1]>\n"
      "decode (float[1,1,1,2] q, float[1,1,1,2] k, float[1,1,1,2] v, float[1,1,P,2] past_key,"
      " float[1,1,P,2] past_value) => (float[1,1,1,2] y, float[1,1,T,2] present_key,"
      " float[1,1,T,2] present_value)\n{\n"
      "  y, present_key, present_value = local.Dec(q, k, v, past_key, past_value)\n}\n"
      "<domain: \"local\", opset_import: [\"\" : 23]>\n"
      "Dec (a, b, c, pk, pv) => (r, nk, nv) { r, nk, nv = Attention(a, b, c, , pk, pv) }";
  auto model = std::make_shared<ModelProto>(ParseModel(text));
  Bind(*model, "past_key", "present_key");
  Bind(*model, "past_value", "present_value");
  PersistentValueState state(model, Initial(1, 1, 0, 2, 2), Capacity(4));
  RuntimeContext context = EventContext();
  for (int t = 1; t <= 3; ++t) {
    { state.Run(context, Token(t, 1, 1, 1, 2, 2)); }
    // The function body's context has no lease: the dense path every token.
    CheckTotals(TakeStorage(context), 2, static_cast<size_t>(16 * t),
                static_cast<size_t>(16 * (t - 1)), 16, 0);
  }
}

TEST_CASE("Concat whose first input is the bound past appends in place") {
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "cache (float[1,1,S,3] k, float[1,1,P,3] past) => (float[1,1,T,3] present)\n"
      "{ present = Concat <axis = 2> (past, k) }";
  auto model = std::make_shared<ModelProto>(ParseModel(text));
  Bind(*model, "past", "present");
  RuntimeValueMap initial;
  initial.emplace("past", RuntimeValue(Filled("past", {1, 1, 1, 3}, 0.0f)));
  PersistentValueState state(model, std::move(initial), Capacity(2));
  RuntimeContext context = EventContext();
  std::vector<float> expected = {0.0f, 0.25f, 0.5f};
  const void* buffer = nullptr;
  for (int t = 1; t <= 4; ++t) {
    CAPTURE(t);
    const int64_t rows = t == 2 ? 2 : 1;
    Tensor k = Filled("k", {1, 1, rows, 3}, static_cast<float>(10 * t));
    const auto kv = k.ToFloatVector();
    expected.insert(expected.end(), kv.begin(), kv.end());
    const Tensor present =
        state.Run(context, {{"k", RuntimeValue(std::move(k))}}).at("present").tensor();
    CHECK(present.ToFloatVector() == expected);
    const Totals totals = TakeStorage(context);
    CHECK(totals.append == static_cast<size_t>(rows * 12));
    if (t == 1) {  // imported 1-row past: capacity 2, prefix copied
      CheckTotals(totals, 1, 24, 12, 12, 0);
    } else if (t == 2) {  // 4 rows > 2: grows to 4, copies the 2-row prefix
      CheckTotals(totals, 1, 48, 24, 24, 0);
      buffer = present.raw_data();
    } else if (t == 3) {  // 5 rows > 4: grows to 8
      CheckTotals(totals, 1, 96, 48, 12, 0);
      buffer = present.raw_data();
    } else {
      CheckTotals(totals, 0, 0, 0, 12, 1);
      CHECK(present.raw_data() == buffer);
    }
  }
}

// Test kernels driving the lease directly.
namespace {

// present = Append(past, new): reserves `attempts` times (the second must throw), then
// commits; with `replace`, returns a copy instead of the committed view.
class AppendKernel final : public KernelBase {
 public:
  AppendKernel(int attempts, bool replace) : attempts_(attempts), replace_(replace) {}
  void Compute(KernelCall& call) const override {
    const Tensor& past = call.input(0);
    const Tensor& chunk = call.input(1);
    Shape shape = past.shape();
    shape[0] += chunk.dim(0);
    auto r = call.context().ReservePersistentAppend(call, shape, 0, 0, 0);
    for (int i = 1; i < attempts_; ++i)
      call.context().ReservePersistentAppend(call, shape, 0, 0, 0);
    if (!r) {
      Tensor& out = call.AllocateOutput(0, past.dtype(), shape);
      std::memcpy(out.mutable_raw_data(), past.raw_data(), past.nbytes());
      std::memcpy(static_cast<char*>(out.mutable_raw_data()) + past.nbytes(), chunk.raw_data(),
                  chunk.nbytes());
      return;
    }
    std::memcpy(r->writable_bytes().data(), chunk.raw_data(), chunk.nbytes());
    Tensor view = call.context().CommitPersistentAppend(call, std::move(*r), chunk.nbytes());
    if (!replace_) {
      call.SetOutput(0, std::move(view));
      return;
    }
    Tensor& copy = call.AllocateOutput(0, view.dtype(), view.shape());
    std::memcpy(copy.mutable_raw_data(), view.raw_data(), view.nbytes());
  }

 private:
  int attempts_;
  bool replace_;
};

// Fails the run after the append when `fail` holds a nonzero value, or cancels `completion`.
struct Saboteur {
  bool fail = false;
  TaskCompletion* cancel = nullptr;
};
class SabotageKernel final : public KernelBase {
 public:
  explicit SabotageKernel(Saboteur* s) : s_(s) {}
  void Compute(KernelCall& call) const override {
    if (s_->fail) call.Fail("sabotaged after the append");
    if (s_->cancel != nullptr) s_->cancel->Cancel("cancelled after the append");
    call.SetOutput(0, call.input(0));
  }

 private:
  Saboteur* s_;
};

std::shared_ptr<ModelProto> AppendModel() {
  auto model = std::make_shared<ModelProto>(
      ParseModel("<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>\n"
                 "grow (float[N] chunk, float[P] past) => (float[T] present, float[T] echo)\n"
                 "{\n  present = test.Append(past, chunk)\n  echo = test.Sabotage(present)\n}"));
  Bind(*model, "past", "present");
  return model;
}

void Register(RuntimeContext& context, int attempts, bool replace, Saboteur* saboteur) {
  context.RegisterKernelFn("test", "Append", symbolic::Device::kCPU,
                           [=](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                             auto k = std::make_unique<AppendKernel>(attempts, replace);
                             k->set_node(node);
                             return std::unique_ptr<KernelBase>(std::move(k));
                           });
  context.RegisterKernelFn("test", "Sabotage", symbolic::Device::kCPU,
                           [=](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                             auto k = std::make_unique<SabotageKernel>(saboteur);
                             k->set_node(node);
                             return std::unique_ptr<KernelBase>(std::move(k));
                           });
}

RuntimeValueMap Past(std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  RuntimeValueMap m;
  m.emplace("past", RuntimeValue(Tensor::FromFloat("past", {n}, std::move(values))));
  return m;
}

RuntimeValueMap Chunk(std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  RuntimeValueMap m;
  m.emplace("chunk", RuntimeValue(Tensor::FromFloat("chunk", {n}, std::move(values))));
  return m;
}

}  // namespace

TEST_CASE("A lease accepts one Reserve attempt, a second attempt throws instead of allocating") {
  Saboteur none;
  for (size_t capacity : {size_t{4}, size_t{0}}) {
    CAPTURE(capacity);
    PersistentValueState state(AppendModel(), Past({1.0f}), Capacity(capacity));
    RuntimeContext context = EventContext();
    Register(context, 2, false, &none);
    // Declined attempts (capacity 0) count too.
    ExpectError([&] { state.Run(context, Chunk({2.0f})); }, ErrorCode::kFailedPrecondition,
                "append lease of persistent binding 'past' was already used");
    CHECK(state.Values().at("past").tensor().ToFloatVector() == std::vector<float>{1.0f});
    CHECK(TakeStorage(context).allocations == (capacity > 0 ? 1u : 0u));
  }
}

TEST_CASE("Failed and cancelled calls leave the previous prefix and length unchanged") {
  Saboteur saboteur;
  PersistentValueState state(AppendModel(), Past({1.0f}), Capacity(8));
  RuntimeContext context = EventContext();
  Register(context, 1, false, &saboteur);
  const void* buffer = nullptr;
  {
    auto out = state.Run(context, Chunk({2.0f}));
    buffer = Data(out, "present");
  }
  saboteur.fail = true;
  ExpectError(
      [&] {
        state.Run(context, Chunk({9.0f, 9.0f}));
      },
      ErrorCode::kInvalidArgument, "sabotaged after the append");
  saboteur.fail = false;
  TaskCompletion completion;
  saboteur.cancel = &completion;
  ExpectError([&] { state.Run(context, Chunk({8.0f}), &completion); }, ErrorCode::kCancelled,
              "cancelled");
  saboteur.cancel = nullptr;
  {
    const RuntimeValueMap values = state.Values();
    CHECK(values.at("past").tensor().ToFloatVector() == std::vector<float>{1.0f, 2.0f});
    CHECK(Data(values, "past") == buffer);
  }
  TakeStorage(context);
  // The retry writes its own rows over the unused tail, in the same buffer.
  {
    auto out = state.Run(context, Chunk({3.0f}));
    CHECK(out.at("present").tensor().ToFloatVector() == std::vector<float>{1.0f, 2.0f, 3.0f});
    CHECK(Data(out, "present") == buffer);
  }
  CheckTotals(TakeStorage(context), 0, 0, 0, 0, 1);
}

TEST_CASE("Capacity is published only when the run returns the committed candidate") {
  Saboteur none;
  PersistentValueState state(AppendModel(), Past({1.0f}), Capacity(8));
  RuntimeContext context = EventContext();
  Register(context, 1, true, &none);  // returns a copy, not the candidate
  for (int t = 0; t < 3; ++t) {
    state.Run(context, Chunk({2.0f}));
  }
  // No certificate survives: every run allocates a new buffer and copies the prefix.
  const Totals totals = TakeStorage(context);
  CHECK(totals.allocations == 3);
  CHECK(totals.reuse == 0);
  CHECK(totals.prefix == 4 * (1 + 2 + 3));
}

TEST_CASE("Commit checks the initialized byte count") {
  class ShortCommit final : public KernelBase {
   public:
    void Compute(KernelCall& call) const override {
      const Tensor& past = call.input(0);
      Shape shape = past.shape();
      shape[0] += 2;
      auto r = call.context().ReservePersistentAppend(call, shape, 0, 0, 0);
      REQUIRE(r.has_value());
      call.context().CommitPersistentAppend(call, std::move(*r), 4);
    }
  };
  auto model = std::make_shared<ModelProto>(
      ParseModel("<ir_version: 10, opset_import: [\"\" : 18, \"test\" : 1]>\n"
                 "grow (float[N] chunk, float[P] past) => (float[T] present)\n"
                 "{ present = test.Short(past, chunk) }"));
  Bind(*model, "past", "present");
  PersistentValueState state(model, Past({1.0f}), Capacity(8));
  RuntimeContext context;
  context.RegisterKernelFn("test", "Short", symbolic::Device::kCPU,
                           [](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                             auto k = std::make_unique<ShortCommit>();
                             k->set_node(node);
                             return std::unique_ptr<KernelBase>(std::move(k));
                           });
  ExpectError(
      [&] {
        state.Run(context, Chunk({2.0f, 3.0f}));
      },
      ErrorCode::kInvalidArgument,
      "initialized 4 bytes of the 8 reserved for persistent binding 'past'");
}

TEST_CASE("Two Attention layers on the flow-graph executor each append to their own caches") {
  std::string inputs, outputs, body;
  for (int l = 0; l < 2; ++l) {
    const std::string s = std::to_string(l);
    inputs += ", float[1,1,P,2] past_key" + s + ", float[1,1,P,2] past_value" + s;
    outputs += ", float[1,1,T,2] present_key" + s + ", float[1,1,T,2] present_value" + s;
    body += "  y" + s + ", present_key" + s + ", present_value" + s +
            " = Attention(q, k, v, , past_key" + s + ", past_value" + s + ")\n";
  }
  auto model = std::make_shared<ModelProto>(ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 23]>\n"
      "layers (float[1,2,1,2] q, float[1,1,1,2] k, float[1,1,1,2] v" +
      inputs + ") => (float[1,2,1,2] y0, float[1,2,1,2] y1" + outputs + ")\n{\n" + body + "}"));
  RuntimeValueMap initial;
  for (int l = 0; l < 2; ++l) {
    const std::string s = std::to_string(l);
    Bind(*model, "past_key" + s, "present_key" + s);
    Bind(*model, "past_value" + s, "present_value" + s);
    initial.emplace("past_key" + s, RuntimeValue(Filled("past_key" + s, {1, 1, 0, 2}, 0.0f)));
    initial.emplace("past_value" + s, RuntimeValue(Filled("past_value" + s, {1, 1, 0, 2}, 0.0f)));
  }
  RuntimeSessionOptions options = Capacity(4);
  options.executor = RuntimeSessionOptions::ExecutorMode::kFlowGraph;
  PersistentValueState state(model, std::move(initial), options);
  RuntimeContext context = EventContext();
  std::vector<const void*> first;
  for (int t = 1; t <= 4; ++t) {
    std::vector<const void*> now;
    {
      auto out = state.Run(context, Token(t, 1, 2, 1, 2, 2));
      for (const char* name : {"present_key0", "present_value0", "present_key1", "present_value1"})
        now.push_back(Data(out, name));
      CHECK(Floats(out.at("y0")) == Floats(out.at("y1")));
    }
    if (t == 1) {
      first = now;
      CheckTotals(TakeStorage(context), 4, 4 * 4 * 8, 0, 4 * 8, 0);
    } else {
      CHECK(now == first);
      CheckTotals(TakeStorage(context), 0, 0, 0, 4 * 8, 4);
    }
  }
}

TEST_CASE("BFLOAT16 caches append their bits in place") {
  auto model = DecodeModel(1, 1, 1, 2, 2, "bfloat16");
  RuntimeValueMap initial;
  initial.emplace("past_key", RuntimeValue(Tensor("past_key", DataType::kBFloat16, {1, 1, 0, 2})));
  initial.emplace("past_value",
                  RuntimeValue(Tensor("past_value", DataType::kBFloat16, {1, 1, 0, 2})));
  PersistentValueState state(model, std::move(initial), Capacity(4));
  RuntimeContext context = EventContext();
  std::vector<uint16_t> values;
  const void* buffer = nullptr;
  for (int t = 1; t <= 3; ++t) {
    RuntimeValueMap feeds;
    for (const char* name : {"q", "k", "v"}) {
      Tensor x(name, DataType::kBFloat16, {1, 1, 1, 2});
      auto* p = x.mutable_data<uint16_t>();
      p[0] = FloatToBFloat16(1.5f * static_cast<float>(t));
      p[1] = FloatToBFloat16(-0.25f * static_cast<float>(t));
      if (std::string(name) == "v") values.insert(values.end(), p, p + 2);
      feeds.emplace(name, RuntimeValue(std::move(x)));
    }
    const Tensor value = state.Run(context, std::move(feeds)).at("present_value").tensor();
    if (t == 1) buffer = value.raw_data();
    CHECK(value.raw_data() == buffer);
    CHECK(std::memcmp(value.raw_data(), values.data(), values.size() * 2) == 0);
    const Totals totals = TakeStorage(context);
    CHECK(totals.append == 2 * (2 + 2));
    CHECK(totals.reuse == (t == 1 ? 0u : 2u));
  }
}
