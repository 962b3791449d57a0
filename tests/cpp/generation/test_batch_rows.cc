// Continuous batching's foundation (issue 15): several requests of different prompt lengths
// decoded together, one model call per step (RunRows), on a small decoder whose
// ai.rt::PagedAttention reads a sequence of row caches bound past <- present. Every request
// produces exactly the tokens it produces alone through Generate, rows join late and leave
// early, and the rows' pages are moved by handle, never copied.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/paged_attention.h"
#include "state/batch_rows.h"
#include "state/generate.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using test_util::ExpectError;

namespace {

constexpr int64_t kVocab = 40, kHidden = 16, kHeads = 4, kKvHeads = 2, kHeadSize = 8;

float Noise(uint32_t seed, int64_t i) {
  uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u + 12345u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 20000u) / 10000.0f - 1.0f;
}

void AddNode(GraphProto* g, const std::string& op, std::vector<std::string> inputs,
             std::vector<std::string> outputs, const std::string& domain = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name(outputs.front());
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
}

void AddWeight(GraphProto* g, const std::string& name, std::vector<int64_t> dims, uint32_t seed,
               float scale) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(scale * Noise(seed, i));
}

void AddInts(GraphProto* g, const std::string& name, std::vector<int64_t> values) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

void AddPerm(GraphProto* g, const std::string& in, const std::string& out) {
  AddNode(g, "Transpose", {in}, {out});
  auto* a = g->mutable_node(g->node_size() - 1)->add_attribute();
  a->set_name("perm");
  a->set_type(AttributeProto::INTS);
  for (int64_t p : {0, 2, 1, 3}) a->add_ints(p);
}

// input_ids [B, L] -> embedding (Gather) -> Q/K/V [B, heads, L, 8] -> PagedAttention over
// past (a sequence of row caches, past <- present) -> output projection + residual -> LM
// head -> logits [B, L, vocab].
std::shared_ptr<ModelProto> RowsDecoder() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* rt = model->add_opset_import();
  rt->set_domain("ai.rt");
  rt->set_version(1);
  GraphProto* g = model->mutable_graph();
  g->set_name("rows_decoder");
  auto* ids = g->add_input();
  ids->set_name("input_ids");
  auto* it = ids->mutable_type()->mutable_tensor_type();
  it->set_elem_type(TensorProto::INT64);
  it->mutable_shape()->add_dim()->set_dim_param("batch");
  it->mutable_shape()->add_dim()->set_dim_param("length");
  auto* past = g->add_input();
  past->set_name("past");
  past->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_struct_type();
  auto* logits = g->add_output();
  logits->set_name("logits");
  logits->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  auto* present = g->add_output();
  present->set_name("present");
  *present->mutable_type() = past->type();

  AddWeight(g, "embed", {kVocab, kHidden}, 1, 1.0f);
  AddWeight(g, "wq", {kHidden, kHeads * kHeadSize}, 2, 0.5f);
  AddWeight(g, "wk", {kHidden, kKvHeads * kHeadSize}, 3, 0.5f);
  AddWeight(g, "wv", {kHidden, kKvHeads * kHeadSize}, 4, 0.5f);
  AddWeight(g, "wo", {kHeads * kHeadSize, kHidden}, 5, 0.3f);
  AddWeight(g, "lm_head", {kHidden, kVocab}, 6, 1.0f);
  AddInts(g, "q_shape", {0, 0, kHeads, kHeadSize});
  AddInts(g, "kv_shape", {0, 0, kKvHeads, kHeadSize});
  AddInts(g, "y_shape", {0, 0, kHeads * kHeadSize});
  AddNode(g, "Gather", {"embed", "input_ids"}, {"x"});
  for (const char* p : {"q", "k", "v"}) {
    const std::string s = p;
    AddNode(g, "MatMul", {"x", "w" + s}, {s + "_flat"});
    AddNode(g, "Reshape", {s + "_flat", s == "q" ? "q_shape" : "kv_shape"}, {s + "_bhsd"});
    AddPerm(g, s + "_bhsd", s + "_heads");
  }
  AddNode(g, "PagedAttention", {"q_heads", "k_heads", "v_heads", "past"}, {"attn", "present"},
          "ai.rt");
  AddPerm(g, "attn", "attn_bshd");
  AddNode(g, "Reshape", {"attn_bshd", "y_shape"}, {"attn_flat"});
  AddNode(g, "MatMul", {"attn_flat", "wo"}, {"attn_out"});
  AddNode(g, "Add", {"x", "attn_out"}, {"h"});
  AddNode(g, "MatMul", {"h", "lm_head"}, {"logits"});
  auto* bind = g->add_persistent_bindings();
  bind->set_input_name("past");
  bind->set_output_name("present");
  return model;
}

Tensor Ids(const std::vector<int64_t>& ids) {
  return Tensor::FromInt64("input_ids", {1, static_cast<int64_t>(ids.size())}, ids);
}

// The greedy token of row r's last position in logits [B, L, vocab].
int64_t Argmax(const Tensor& logits, int64_t r) {
  const int64_t len = logits.dim(1);
  const float* row = logits.data<float>() + (r * len + len - 1) * kVocab;
  return std::max_element(row, row + kVocab) - row;
}

// What request `prompt` generates alone: Generate with its own state (batch 1, one row cache).
std::vector<int64_t> Alone(const std::shared_ptr<const ModelProto>& model,
                           const std::vector<int64_t>& prompt, int64_t new_tokens) {
  RuntimeContext context;
  RuntimeValueMap feeds;
  feeds["input_ids"] = RuntimeValue(Ids(prompt));
  feeds["past"] = PagedAttention::AssembleRows({PagedAttention::EmptyCache()});
  GenerationOptions options;
  options.max_new_tokens = new_tokens;
  const Tensor out = Generate(model, context, std::move(feeds), options);
  const int64_t* p = out.data<int64_t>();
  return std::vector<int64_t>(p + prompt.size(), p + out.numel());
}

struct Request {
  std::vector<int64_t> prompt;
  int64_t join_step = 0;   // the decode step at which its prompt is evaluated
  int64_t new_tokens = 0;  // then it leaves
  RuntimeValueMap caches;  // {"past": its row cache}
  std::vector<int64_t> tokens;
};

}  // namespace

TEST_CASE(
    "Requests of different prompt lengths decoded together, one model call per step, give "
    "exactly the tokens each gives alone through Generate, with late joins and early leaves") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeSession session(model);
  RuntimeContext context;
  std::vector<Request> requests = {{{3, 17, 5, 9, 21, 2, 30}, 0, 12, {}, {}},
                                   {{11}, 0, 9, {}, {}},
                                   {{4, 4, 8, 1}, 2, 10, {}, {}},
                                   {{39, 0, 12, 7, 7, 25, 33, 18, 6, 14, 2}, 3, 6, {}, {}},
                                   {{20, 19}, 5, 8, {}, {}}};
  int64_t decode_calls = 0;
  for (int64_t step = 0;; ++step) {
    // Joining requests: the prompt alone (rows of one call share a new-token length).
    for (Request& r : requests)
      if (r.join_step == step) {
        r.caches["past"] = PagedAttention::EmptyCache();
        RuntimeValueMap feeds;
        feeds["input_ids"] = RuntimeValue(Ids(r.prompt));
        const RuntimeValueMap out = RunRows(session, context, std::move(feeds), {&r.caches});
        r.tokens.push_back(Argmax(out.at("logits").tensor(), 0));
      }
    // Every running request's last token as one batch row: one call.
    std::vector<Request*> running;
    for (Request& r : requests)
      if (!r.tokens.empty() && static_cast<int64_t>(r.tokens.size()) < r.new_tokens)
        running.push_back(&r);
    if (running.empty() && step > 5) break;
    if (running.empty()) continue;
    std::vector<int64_t> last;
    std::vector<RuntimeValueMap*> rows;
    for (Request* r : running) {
      last.push_back(r->tokens.back());
      rows.push_back(&r->caches);
    }
    RuntimeValueMap feeds;
    feeds["input_ids"] = RuntimeValue(
        Tensor::FromInt64("input_ids", {static_cast<int64_t>(running.size()), 1}, last));
    const RuntimeValueMap out = RunRows(session, context, std::move(feeds), rows);
    ++decode_calls;
    CHECK(out.count("present") == 0);  // the rows got their caches back
    for (size_t b = 0; b < running.size(); ++b)
      running[b]->tokens.push_back(Argmax(out.at("logits").tensor(), static_cast<int64_t>(b)));
  }
  // Steps 0..10 ran with up to four rows at once: far fewer calls than tokens.
  int64_t decoded = 0;
  for (const Request& r : requests) decoded += r.new_tokens - 1;
  CHECK(decode_calls < decoded);
  for (size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    for (size_t j = 0; j < i; ++j) CHECK(requests[i].tokens != requests[j].tokens);
    const Request& r = requests[i];
    CHECK(r.tokens == Alone(model, r.prompt, r.new_tokens));
    // The row cache holds the prompt and every token fed back.
    int64_t length = 0;
    const RuntimeSequence& blocks = r.caches.at("past").field("blocks").elements();
    for (size_t p = 0; p < blocks.size(); ++p)
      length += blocks[p].field("length").tensor().data<int64_t>()[0];
    CHECK(length == static_cast<int64_t>(r.prompt.size()) + r.new_tokens - 1);
  }
}

TEST_CASE("RunRows moves the rows' pages by handle and keeps them when the call fails") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeSession session(model);
  RuntimeContext context;
  RuntimeValueMap a, b;
  auto prefill = [&](RuntimeValueMap& row, const std::vector<int64_t>& prompt) {
    row["past"] = PagedAttention::EmptyCache();
    RuntimeValueMap feeds;
    feeds["input_ids"] = RuntimeValue(Ids(prompt));
    RunRows(session, context, std::move(feeds), {&row});
  };
  prefill(a, {1, 2, 3});
  prefill(b, {4});
  auto first_key = [](const RuntimeValueMap& row) {
    return row.at("past").field("blocks").elements()[0].field("key").tensor().raw_data();
  };
  const void* a0 = first_key(a);
  const void* b0 = first_key(b);
  RuntimeValueMap feeds;
  feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {2, 1}, {7, 8}));
  RunRows(session, context, std::move(feeds), {&a, &b});
  CHECK(first_key(a) == a0);  // the prompt pages, shared through assembly, run and split
  CHECK(first_key(b) == b0);
  CHECK(a.at("past").field("blocks").elements().size() == 2);

  // Three ids for two rows: the kernel names past; both rows keep their caches.
  RuntimeValueMap bad;
  bad["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {3, 1}, {7, 8, 9}));
  ExpectError(
      [&] {
        RunRows(session, context, std::move(bad), {&a, &b});
      },
      ErrorCode::kInvalidArgument, "past holds 2 row caches but Q/K/V have batch 3");
  CHECK(first_key(a) == a0);
  CHECK(a.at("past").field("blocks").elements().size() == 2);
  RuntimeValueMap none;
  ExpectError(
      [&] {
        RuntimeValueMap f;
        f["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {1, 1}, {7}));
        RunRows(session, context, std::move(f), {&none});
      },
      ErrorCode::kInvalidArgument, "RunRows: row 0 has no cache for bound input 'past'");
}
