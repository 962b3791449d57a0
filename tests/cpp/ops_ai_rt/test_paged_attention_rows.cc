// ai.rt::PagedAttention over batch rows with their own caches (issue 15, the foundation of
// continuous batching): `past` as a sequence of row caches of different lengths and
// formats. Row by row the batched call gives what each row gives alone on its own cache;
// assembling and splitting the batch move owner handles, never page payloads.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "ops/ai_rt/paged_attention.h"
#include "paged_fixtures.h"

using namespace paged_test;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using Formats = PagedAttention::Formats;
using test_util::ExpectError;

namespace {

std::unique_ptr<PagedAttention> MakeKernel(PagedAttention::FormatSelector select = nullptr) {
  KernelContext ctx;
  auto kernel = std::make_unique<PagedAttention>(ctx, std::move(select));
  kernel->set_node(PagedNode());
  return kernel;
}

// INT8 keys and UINT4 values once a row holds 32 tokens (dense FLOAT before): rows of one
// batch then append pages of different formats.
Formats GrowingFormats(const Tensor&, const Tensor&, int64_t past_length) {
  if (past_length < 32) return Formats{};
  return Formats{{TensorProto::INT8, 0.01f, 0}, {TensorProto::UINT4, 0.25f, 8}};
}

struct Dims {
  int64_t heads, kv_heads, dk, dv;
};

Tensor Random(const std::string& name, Shape shape, uint32_t seed) {
  return Floats(name, std::move(shape), [seed](int64_t i) { return Noise(seed, i); });
}

// A row cache of `length` tokens built by prompt calls of the kernel (with its formats), 16
// tokens at a time.
RuntimeValue RowCache(const PagedAttention& kernel, const Dims& d, int64_t length, uint32_t seed) {
  RuntimeValue cache = PagedAttention::EmptyCache();
  for (int64_t done = 0; done < length;) {
    const int64_t n = std::min<int64_t>(length - done, 16);
    cache = kernel
                .Run(Random("q", {1, d.heads, n, d.dk}, seed),
                     Random("k", {1, d.kv_heads, n, d.dk}, seed + 1),
                     Random("v", {1, d.kv_heads, n, d.dv}, seed + 2), cache)
                .present;
    done += n;
    seed += 3;
  }
  return cache;
}

// Batch row b of a [B, ...] tensor as its own [1, ...] tensor.
Tensor RowOf(const Tensor& t, int64_t b) {
  Shape shape = t.shape();
  shape[0] = 1;
  const int64_t n = ShapeNumel(shape);
  const float* p = t.data<float>() + b * n;
  return Tensor::FromFloat(t.name(), shape, std::vector<float>(p, p + n));
}

const RuntimeSequence& Blocks(const RuntimeValue& cache) {
  return cache.field("blocks").elements();
}

const void* PayloadAddress(const RuntimeValue& payload) {
  return payload.is_tensor() ? payload.tensor().raw_data()
                             : static_cast<const void*>(payload.encoded().raw_data().data());
}

// The payload addresses of every page of `cache`, keys then values, in order.
std::vector<const void*> Addresses(const RuntimeValue& cache) {
  std::vector<const void*> out;
  for (size_t i = 0; i < Blocks(cache).size(); ++i)
    for (const char* f : {"key", "value"}) out.push_back(PayloadAddress(Blocks(cache)[i].field(f)));
  return out;
}

int64_t Length(const RuntimeValue& cache) {
  int64_t n = 0;
  for (size_t i = 0; i < Blocks(cache).size(); ++i)
    n += Blocks(cache)[i].field("length").tensor().data<int64_t>()[0];
  return n;
}

}  // namespace

TEST_CASE(
    "Rows with their own caches (empty, short, quantized, long) give row by row what each row "
    "gives alone within 1e-6: Y, the present pages and their formats, 1 and 2 threads") {
  // Blocked path (head size 16, group 4) and the narrow-head path (head sizes 3 and 2).
  const Dims shapes[] = {{8, 2, 16, 16}, {2, 1, 3, 2}};
  const int64_t lengths[] = {0, 5, 37, 300, 1};  // row 2 holds INT8/UINT4 pages (from 32 on)
  const int64_t batch = 5;
  for (const Dims& d : shapes)
    for (int64_t len : {1, 3})
      for (int threads : {1, 2}) {
        CAPTURE(d.dk);
        CAPTURE(len);
        CAPTURE(threads);
        tbb::task_arena arena(threads);
        arena.execute([&] {
          auto kernel = MakeKernel(GrowingFormats);
          std::vector<RuntimeValue> caches;
          for (int64_t b = 0; b < batch; ++b)
            caches.push_back(RowCache(*kernel, d, lengths[b], static_cast<uint32_t>(10 * b + 1)));
          // Row 2's history holds quantized pages, the others dense ones only.
          CHECK(Blocks(caches[2])[2].field("key").is_encoded());
          CHECK(Blocks(caches[3])[0].field("key").is_tensor());
          const Tensor q = Random("q", {batch, d.heads, len, d.dk}, 91);
          const Tensor k = Random("k", {batch, d.kv_heads, len, d.dk}, 92);
          const Tensor v = Random("v", {batch, d.kv_heads, len, d.dv}, 93);
          const auto batched = kernel->Run(q, k, v, PagedAttention::AssembleRows(caches));
          REQUIRE(batched.present.is_sequence());
          REQUIRE(batched.present.elements().size() == static_cast<size_t>(batch));
          const auto y = batched.y.ToFloatVector();
          const size_t per_row = y.size() / static_cast<size_t>(batch);
          size_t copied = 0, dequantized = 0;
          for (int64_t b = 0; b < batch; ++b) {
            CAPTURE(b);
            const auto alone = kernel->Run(RowOf(q, b), RowOf(k, b), RowOf(v, b), caches[b]);
            const auto ya = alone.y.ToFloatVector();
            REQUIRE(ya.size() == per_row);
            float err = 0;
            for (size_t e = 0; e < per_row; ++e)
              err = std::max(err, std::abs(y[static_cast<size_t>(b) * per_row + e] - ya[e]));
            CHECK(err <= 1e-6f);
            const RuntimeValue& row = batched.present.elements()[static_cast<size_t>(b)];
            CHECK(Length(row) == lengths[b] + len);
            CHECK(row.ContentEquals(alone.present));  // same pages, same formats, same codes
            copied += alone.statistics.copied_bytes;
            dequantized += alone.statistics.dequantized_bytes;
          }
          // The new pages of row 2 (37 retained tokens) are INT8/UINT4; row 1's are FLOAT.
          const RuntimeValue& row2 = batched.present.elements()[2];
          CHECK(Blocks(row2)[Blocks(row2).size() - 1].field("key").is_encoded());
          const RuntimeValue& row1 = batched.present.elements()[1];
          CHECK(Blocks(row1)[Blocks(row1).size() - 1].field("key").is_tensor());
          CHECK(batched.statistics.copied_bytes == copied);
          CHECK(batched.statistics.dequantized_bytes == dequantized);
        });
      }
}

TEST_CASE(
    "Decode steps over exclusive row caches fill each row's last page in place while the "
    "attention runs: Y and present as each row alone, one new page per 16 steps, no page "
    "checked again after the first step, 1 and 2 threads") {
  const Dims d{8, 2, 16, 16};
  const int64_t lengths[] = {0, 5, 37, 16, 1, 33};  // rows 2 and 5 append INT8/UINT4 pages
  const int64_t batch = 6, steps = 20;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    tbb::task_arena arena(threads);
    arena.execute([&] {
      auto builder = MakeKernel(GrowingFormats);
      std::vector<RuntimeValue> rows, alone_rows;
      size_t blocks = 0;
      for (int64_t b = 0; b < batch; ++b) {
        rows.push_back(RowCache(*builder, d, lengths[b], static_cast<uint32_t>(7 * b + 2)));
        alone_rows.push_back(rows.back().DeepCopy());  // the alone runs write their own pages
        blocks += Blocks(rows.back()).size();
      }
      // Fresh kernels: the first step checks every page it was given, later ones none.
      auto kernel = MakeKernel(GrowingFormats), alone_kernel = MakeKernel(GrowingFormats);
      for (int64_t s = 0; s < steps; ++s) {
        CAPTURE(s);
        const auto seed = static_cast<uint32_t>(100 + 3 * s);
        const Tensor q = Random("q", {batch, d.heads, 1, d.dk}, seed);
        const Tensor k = Random("k", {batch, d.kv_heads, 1, d.dk}, seed + 1);
        const Tensor v = Random("v", {batch, d.kv_heads, 1, d.dv}, seed + 2);
        const auto batched = kernel->Run(q, k, v, PagedAttention::AssembleRows(std::move(rows)),
                                         DefaultAllocator(), PagedTail::kExclusive);
        CHECK(batched.statistics.validated_pages == (s == 0 ? blocks : 0u));
        rows = PagedAttention::SplitRows(batched.present);
        const auto y = batched.y.ToFloatVector();
        const size_t per_row = y.size() / static_cast<size_t>(batch);
        size_t copied = 0;
        for (int64_t b = 0; b < batch; ++b) {
          CAPTURE(b);
          auto& alone_row = alone_rows[static_cast<size_t>(b)];
          const auto alone = alone_kernel->Run(RowOf(q, b), RowOf(k, b), RowOf(v, b), alone_row,
                                               DefaultAllocator(), PagedTail::kExclusive);
          alone_row = alone.present;
          copied += alone.statistics.copied_bytes;
          const auto ya = alone.y.ToFloatVector();
          float err = 0;
          for (size_t e = 0; e < per_row; ++e)
            err = std::max(err, std::abs(y[static_cast<size_t>(b) * per_row + e] - ya[e]));
          CHECK(err <= 1e-6f);
          CHECK(rows[static_cast<size_t>(b)].ContentEquals(alone_row));
        }
        CHECK(batched.statistics.copied_bytes == copied);
      }
      for (int64_t b = 0; b < batch; ++b) {
        CAPTURE(b);
        // The prompt pages are full (their capacity is their length): the steps open one
        // page of 16 rows and fill it, then a second one.
        const size_t prompt_pages = static_cast<size_t>((lengths[b] + 15) / 16);
        CHECK(Blocks(rows[static_cast<size_t>(b)]).size() == prompt_pages + 2);
        CHECK(Length(rows[static_cast<size_t>(b)]) == lengths[b] + steps);
      }
    });
  }
}

TEST_CASE(
    "Assembling a batch from row caches and splitting present back moves owner handles: every "
    "page payload keeps its address, and the rows' field lists are the caches' own") {
  const Dims d{4, 2, 16, 16};
  auto kernel = MakeKernel(GrowingFormats);
  std::vector<RuntimeValue> caches;
  for (int64_t length : {40, 0, 17})
    caches.push_back(RowCache(*kernel, d, length, static_cast<uint32_t>(length + 3)));
  std::vector<std::vector<const void*>> before;
  for (const auto& c : caches) before.push_back(Addresses(c));

  const RuntimeValue past = PagedAttention::AssembleRows(caches);
  for (size_t b = 0; b < caches.size(); ++b) {
    // The sequence holds the caches' field lists themselves (a handle, not a copy).
    CHECK(&past.elements()[b].fields() == &caches[b].fields());
    CHECK(Addresses(past.elements()[b]) == before[b]);
  }
  const auto r = kernel->Run(Random("q", {3, 4, 1, 16}, 1), Random("k", {3, 2, 1, 16}, 2),
                             Random("v", {3, 2, 1, 16}, 3), past);
  const std::vector<RuntimeValue> rows = PagedAttention::SplitRows(r.present);
  REQUIRE(rows.size() == caches.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    CAPTURE(b);
    CHECK(&rows[b].fields() == &r.present.elements()[b].fields());
    // Each row's old pages are the same payloads, followed by its one new page.
    const std::vector<const void*> after = Addresses(rows[b]);
    REQUIRE(after.size() == before[b].size() + 2);
    CHECK(std::equal(before[b].begin(), before[b].end(), after.begin()));
  }
  // The batch call wrote the three new tokens' pages and nothing else: 4 KV rows of 16
  // FLOAT keys and values for rows 1 and 2 (dense), INT8 keys + UINT4 values for row 0.
  CHECK(r.statistics.copied_bytes == 2u * (2 * 16 * 4 * 2) + (2 * 16 * 1 + 2 * 16 / 2));
  // Splitting does not disturb the caches the batch was assembled from.
  for (size_t b = 0; b < caches.size(); ++b) CHECK(Addresses(caches[b]) == before[b]);
}

TEST_CASE("Row caches that do not fit the batch are rejected naming past and the row") {
  const Dims d{4, 2, 8, 8};
  auto kernel = MakeKernel();
  const RuntimeValue a = RowCache(*kernel, d, 3, 1);
  const Tensor q = Random("q", {2, 4, 1, 8}, 1), k = Random("k", {2, 2, 1, 8}, 2),
               v = Random("v", {2, 2, 1, 8}, 3);
  // Sequence length != batch.
  ExpectError(
      [&] {
        kernel->Run(q, k, v, PagedAttention::AssembleRows({a, a, a}));
      },
      ErrorCode::kInvalidArgument,
      "node 'attn': past holds 3 row caches but Q/K/V have batch 2 (a sequence past has one "
      "paged cache per batch row)");
  // Row 1's cache has one KV head, K has two.
  const RuntimeValue one_head = RowCache(*kernel, {1, 1, 8, 8}, 4, 5);
  ExpectError(
      [&] {
        kernel->Run(q, k, v, PagedAttention::AssembleRows({a, one_head}));
      },
      ErrorCode::kInvalidArgument,
      "node 'attn': past[1].blocks[0]: key [1, 1, 4, 8] and value [1, 1, 4, 8] pages do not fit "
      "K/V of [1, 2, *, 8/8] (one batch row per row cache)");
  // A row cache holding two batch rows.
  const RuntimeValue two_rows =
      kernel->Run(q, k, v, PagedAttention::EmptyCache()).present;  // pages [2, 2, 1, 8]
  ExpectError(
      [&] {
        kernel->Run(q, k, v, PagedAttention::AssembleRows({two_rows, a}));
      },
      ErrorCode::kInvalidArgument,
      "node 'attn': past[0].blocks[0]: key [2, 2, 1, 8] and value [2, 2, 1, 8] pages do not fit "
      "K/V of [1, 2, *, 8/8] (one batch row per row cache)");
  // An element that is not a paged cache.
  ExpectError(
      [&] {
        kernel->Run(q, k, v, PagedAttention::AssembleRows({a, RuntimeValue(Tensor(q))}));
      },
      ErrorCode::kInvalidArgument,
      "node 'attn': past[1] (row 1 of the batch's caches) must be a paged cache");
  // A row past max_tokens is named by its row.
  NodeProto node;
  node.set_op_type("PagedAttention");
  node.set_name("attn");
  auto* m = node.add_attribute();
  m->set_name("max_tokens");
  m->set_type(AttributeProto::INT);
  m->set_i(3);
  KernelContext ctx;
  PagedAttention small(ctx);
  small.set_node(node);
  ExpectError(
      [&] {
        small.Run(q, k, v, PagedAttention::AssembleRows({PagedAttention::EmptyCache(), a}));
      },
      ErrorCode::kInvalidArgument,
      "node 'attn': past[1]: 3 retained + 1 new tokens exceed max_tokens 3");
  ExpectError([&] { PagedAttention::SplitRows(a); }, ErrorCode::kInvalidArgument,
              "PagedAttention::SplitRows: expected a sequence of row caches, got a struct");
}
