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
#include "rows_decoder.h"
#include "state/batch_rows.h"
#include "state/generate.h"
#include "state/persistent_value_state.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using test_util::ExpectError;

namespace {

using test_util::kVocab;
using test_util::RowsDecoder;

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
    // Nobody else held the rows' caches: decode filled their last pages in place (pages of
    // block_size 16), not one page per token.
    CHECK(static_cast<int64_t>(blocks.size()) == (length + 15) / 16);
  }
}

int64_t Pages(const RuntimeValue& cache) {
  return static_cast<int64_t>(cache.field("blocks").elements().size());
}

TEST_CASE(
    "A state bound to a sequence of row caches fills each unshared row's last page in place, "
    "and a values() alias keeps its view while the state appends new pages") {
  const std::shared_ptr<const ModelProto> model = RowsDecoder();
  RuntimeContext context;
  RuntimeValueMap initial;
  initial["past"] =
      PagedAttention::AssembleRows({PagedAttention::EmptyCache(), PagedAttention::EmptyCache()});
  PersistentValueState state(model, initial);
  initial.clear();
  RuntimeValueMap feeds;
  feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {2, 3}, {1, 2, 3, 4, 5, 6}));
  state.Run(context, feeds);
  for (int step = 0; step < 20; ++step) {
    feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {2, 1}, {step, 30 - step}));
    state.Run(context, feeds);
  }
  RuntimeValueMap view = state.Values();  // an alias of both rows
  const std::vector<RuntimeValue> rows = PagedAttention::SplitRows(view.at("past"));
  REQUIRE(rows.size() == 2);
  for (const RuntimeValue& row : rows) CHECK(Pages(row) == 2);  // 23 tokens: 16 + 7
  const RuntimeValue& last = rows[0].field("blocks").elements()[1];
  const std::vector<float> before = last.field("key").tensor().ToFloatVector();
  feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {2, 1}, {9, 9}));
  state.Run(context, feeds);
  // The aliased last pages are not written: the new token went to a new page.
  const std::vector<RuntimeValue> now = PagedAttention::SplitRows(state.Values().at("past"));
  for (const RuntimeValue& row : now) CHECK(Pages(row) == 3);
  CHECK(last.field("length").tensor().data<int64_t>()[0] == 7);
  CHECK(last.field("key").tensor().ToFloatVector() == before);

  // 40 rows: the sequence's tree has internal nodes; every row is still found unshared.
  std::vector<RuntimeValue> empty(40, PagedAttention::EmptyCache());
  RuntimeValueMap many;
  many["past"] = PagedAttention::AssembleRows(empty);
  empty.clear();
  PersistentValueState wide(model, many);
  many.clear();
  std::vector<int64_t> ids(40 * 3);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i % kVocab);
  feeds["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {40, 3}, ids));
  wide.Run(context, feeds);
  for (int step = 0; step < 3; ++step) {
    feeds["input_ids"] =
        RuntimeValue(Tensor::FromInt64("input_ids", {40, 1}, std::vector<int64_t>(40, step)));
    wide.Run(context, feeds);
  }
  for (const RuntimeValue& row : PagedAttention::SplitRows(wide.Values().at("past")))
    CHECK(Pages(row) == 1);  // 6 tokens, one page each
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
  const RuntimeValue b_alias = b.at("past");  // someone else holds b's cache
  RunRows(session, context, std::move(feeds), {&a, &b});
  CHECK(first_key(a) == a0);  // the prompt pages, shared through assembly, run and split
  CHECK(first_key(b) == b0);
  auto pages = [](const RuntimeValue& cache) { return cache.field("blocks").elements().size(); };
  // a alone held its cache: the token went into its last page's spare rows; b's page is
  // aliased, so b got a new page and the alias still sees one token.
  CHECK(pages(a.at("past")) == 1);
  CHECK(a.at("past").field("blocks").elements()[0].field("length").tensor().data<int64_t>()[0] ==
        4);
  CHECK(pages(b.at("past")) == 2);
  CHECK(pages(b_alias) == 1);
  CHECK(b_alias.field("blocks").elements()[0].field("length").tensor().data<int64_t>()[0] == 1);

  // Three ids for two rows: the kernel names past; both rows keep their caches.
  RuntimeValueMap bad;
  bad["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {3, 1}, {7, 8, 9}));
  ExpectError(
      [&] {
        RunRows(session, context, std::move(bad), {&a, &b});
      },
      ErrorCode::kInvalidArgument, "past holds 2 row caches but Q/K/V have batch 3");
  CHECK(first_key(a) == a0);
  CHECK(pages(a.at("past")) == 1);
  CHECK(a.at("past").field("blocks").elements()[0].field("length").tensor().data<int64_t>()[0] ==
        4);
  CHECK(pages(b.at("past")) == 2);
  RuntimeValueMap none;
  ExpectError(
      [&] {
        RuntimeValueMap f;
        f["input_ids"] = RuntimeValue(Tensor::FromInt64("input_ids", {1, 1}, {7}));
        RunRows(session, context, std::move(f), {&none});
      },
      ErrorCode::kInvalidArgument, "RunRows: row 0 has no cache for bound input 'past'");
}
