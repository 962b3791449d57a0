// ai.rt::PagedAttention: see paged_attention.h. The call is analysed once (inputs, page
// views from the per-kernel memo, visible ranges), then each (batch, query) attends over its
// visible tokens with an online softmax, page-major: a group of pages for every KV head in
// turn (the query heads sharing a KV head scored together), then the current K/V as FLOAT.
// Pages are read as stored: dots and value sums run on the FLOAT/FLOAT16/BFLOAT16 rows or
// the affine codes themselves (math::GroupCodeDots / GroupCodeWeightedRowSums, scale and zero
// point applied per page), and only pages whose parameters vary within a row range are
// decoded to FLOAT rows first. Long ranges are split into chunks whose (max, sum, partial
// output) are merged by log-sum-exp. The current K/V are encoded into new pages (or an
// exclusive last page's spare rows) and appended to a copy-on-write sequence that shares
// every old page; with several rows, each row's append runs as a task beside the attention.
#include "ops/ai_rt/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "executor/attributes.h"
#include "executor/parallel.h"
#include "executor/runtime_context.h"
#include "ops/ai_rt/cache_page.h"
#include "ops/ai_rt/page_view.h"
#include "ops/ai_rt/page_writer.h"
#include "ops/kernel_factory.h"
#include "ops/math/code_dot.h"
#include "ops/math/vector_ops.h"
#include "ops/math/vexp.h"

namespace onnx_light::onnx_kernels::kernel {

using core::DataType;
using core::ErrorCode;
using core::runtime::RuntimeSequence;
using core::runtime::Shape;
using core::runtime::ShapeToString;
using ops::ai_rt::PageFormat;
using ops::ai_rt::PageView;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kKeyBlock = 64;       // tokens scored per online-softmax step
constexpr int64_t kSplitMinKeys = 256;  // below this a query's range is never split
constexpr int64_t kSmallHead = 8;       // narrower heads take the token-at-a-time path
// How far ahead (bytes of the task's reads) the kernels prefetch a group's rows: as many KV
// heads later as make up 64 KiB (one for FLOAT pages of 16 tokens x 128 elements, the next
// group's heads past the last). At the next group's same head, 8 heads (512 KiB) ahead for
// that shape, FLOAT decode at 8k/32k tokens took 1.06-1.38x as long (perf/README.md,
// "2026-12-04 (late)"); INT8 is the same either way.
constexpr int64_t kAheadBytes = 64 << 10;

using Page = ops::ai_rt::CachePage;

struct Partial {
  float max = kNegInf;
  float sum = 0;
};

// A FLOAT view of a Q/K/V input: the tensor's data, or a converted copy (scratch).
struct FloatInput {
  const float* data = nullptr;
  std::vector<float> owned;
};

FloatInput AsFloat(const Tensor& t) {
  FloatInput in;
  if (t.dtype() == DataType::kFloat) {
    in.data = t.data<float>();
  } else {
    in.owned = t.ToFloatVector();
    in.data = in.owned.data();
  }
  return in;
}

// Whether rows of `width` elements in `f` start and end on whole bytes (no byte holds codes
// of two rows).
bool WholeByteRows(const PageFormat& f, int64_t width) {
  return core::StorageBytes(f.storage, width) * 8 ==
         static_cast<size_t>(width) * static_cast<size_t>(core::ElementBits(f.storage));
}

PageFormat ToPageFormat(const PagedAttention::Format& f) {
  return {static_cast<DataType>(f.storage), f.scale, f.zero_point};
}

}  // namespace

// The pages of a cache this kernel returned as `present`, in order, with the shapes they
// were checked against. The pages belong to the page memo's entries, which live as long as
// their blocks, which the cache holds: valid while the cache is.
struct PagedAttention::KnownPages {
  std::vector<const Page*> pages;
  std::vector<const RuntimeValue*> blocks;
  int64_t past = 0;
  int64_t page_batch = 0, kv_heads = 0, dk = 0, dv = 0;
};

// Pages already checked by this kernel instance, keyed by their block value; the weak
// handle proves the address still denotes that block. An entry is replaced or pruned only
// once its block is gone, so a call's raw page pointers stay valid while its past lives.
// `known`: the presents this kernel returned, keyed by their field lists, so that a decode
// step feeding one back takes its pages in one lookup: walking a batch's blocks and their
// memo entries cost 5-8 us a row in a decoder's step, every line evicted by the layer's
// weights (issue 15). Locked only while pages are analysed or recorded.
struct PagedAttention::PageMemo {
  struct Entry {
    std::weak_ptr<const RuntimeValue> block;
    std::shared_ptr<const Page> page;
  };
  struct Known {
    std::weak_ptr<const void> cache;
    std::shared_ptr<const KnownPages> pages;
  };
  std::mutex mutex;
  std::unordered_map<const RuntimeValue*, Entry> entries;
  std::unordered_map<const void*, Known> known;
  size_t prune_at = 256, prune_known_at = 256;

  // Drops the entries of blocks and caches that are gone, once their count has doubled.
  void Prune() {
    if (entries.size() >= prune_at) {
      std::erase_if(entries, [](const auto& e) { return e.second.block.expired(); });
      prune_at = std::max<size_t>(256, 2 * entries.size());
    }
    if (known.size() >= prune_known_at) {
      std::erase_if(known, [](const auto& e) { return e.second.cache.expired(); });
      prune_known_at = std::max<size_t>(256, 2 * known.size());
    }
  }
};

// The past of one batch row: the pages of its cache (every row's, for a single cache) and
// the formats of the pages its new tokens become. Raw pointers: the pages are the memo's
// and the blocks the cache's (see KnownPages).
struct PagedAttention::RowPast {
  std::vector<const Page*> pages;
  std::vector<const RuntimeValue*> blocks;  // the cache's, in order
  int64_t past = 0;                         // retained tokens
  PageFormat key_format, value_format;
  core::runtime::PagedTail tail = core::runtime::PagedTail::kNone;

  // The first page holding a token at or after `t` (binary search over the starts).
  size_t PageAt(int64_t t) const {
    auto it = std::upper_bound(pages.begin(), pages.end(), t,
                               [](int64_t x, const auto& pg) { return x < pg->start; });
    return it == pages.begin() ? 0 : static_cast<size_t>(it - pages.begin() - 1);
  }
};

// Everything one execution needs, computed once before the numerical work.
struct PagedAttention::Call {
  int64_t batch = 0, heads = 0, kv_heads = 0, group = 0, len = 0, dk = 0, dv = 0;
  FloatInput q, k, v;
  // One entry for a single cache (its pages hold every batch row), or one per batch row
  // (past given as a sequence of row caches, each with its own length and pages).
  std::vector<RowPast> rows;
  bool per_row = false;
  float scale = 1;
  Statistics stats;
  const PagedAttention* kernel = nullptr;

  const RowPast& Row(int64_t b) const { return rows[static_cast<size_t>(per_row ? b : 0)]; }
  // Batch row b's index inside its pages (row caches hold one row each).
  int64_t PageBatch(int64_t b) const { return per_row ? 0 : b; }
  // Visible positions [lo, hi) of query i of batch row b (at position past + i).
  std::pair<int64_t, int64_t> Visible(int64_t b, int64_t i) const {
    const int64_t past = Row(b).past;
    const int64_t p = past + i;
    const int64_t hi = kernel->is_causal() ? p + 1 : past + len;
    const int64_t lo =
        kernel->left_window_size() >= 0 ? std::max<int64_t>(0, p - kernel->left_window_size()) : 0;
    return {std::min(lo, hi), hi};
  }
  const float* CurrentKey(int64_t b, int64_t g, int64_t r) const {
    return k.data + ((b * kv_heads + g) * len + r) * dk;
  }
  const float* CurrentValue(int64_t b, int64_t g, int64_t r) const {
    return v.data + ((b * kv_heads + g) * len + r) * dv;
  }
  const float* Query(int64_t b, int64_t h, int64_t i) const {
    return q.data + ((b * heads + h) * len + i) * dk;
  }
};

namespace {

using Call = PagedAttention::Call;

// Up to kKeyBlock visible tokens of one KV head in runs that each lie in one page (or in the
// current K/V), as stored: run r's keys and values are keys[r] and values[r] (math::CodeRows,
// read by the code-domain kernels without decoding), or FLOAT rows decoded into the task's
// buffers when the page's affine parameters vary within its rows.
struct TokenBlock {
  ops::math::CodeRows keys[kKeyBlock];
  ops::math::CodeRows values[kKeyBlock];
  int runs = 0;
  int64_t tokens = 0;
};

// The blocked path. Tasks are (batch, query, chunk of the visible range); each reads its
// range page-major: a group of consecutive pages (at most kKeyBlock tokens) for every KV head
// in turn, then the next group. One page holds every head's rows back to back, so the task
// streams each payload from start to end; reading one head's rows across all pages before
// the next head's (8 KiB of every 64 KiB payload at a time) ran at a third of the memory
// read rate (perf/README.md, "Paged KV decode"). The query heads sharing a KV head are scored
// together; their (max, sum, partial output) per chunk are merged by log-sum-exp.
class BlockedAttention {
 public:
  BlockedAttention(const Call& c, float* y) : c_(c), y_(y) {}

  // `side(j)` for j in [0, side_tasks) runs among the attention's tasks (the rows' appends).
  size_t Run(int64_t side_tasks = 0, const std::function<void(int64_t)>& side = nullptr) {
    const int64_t threads = core::runtime::IntraOpThreads();
    rows_ = c_.batch * c_.len;
    int64_t longest = 0;
    for (int64_t b = 0; b < (c_.per_row ? c_.batch : 1); ++b)
      for (int64_t i = 0; i < c_.len; ++i) {
        const auto [lo, hi] = c_.Visible(b, i);
        longest = std::max(longest, hi - lo);
      }
    // Four tasks per thread (a core another process holds up delays a quarter of its share,
    // which the other thread takes over), never chunks below kSplitMinKeys tokens; none on one
    // thread. Each chunk costs a task's setup and a partial to merge: at 1k tokens, 4 chunks
    // on one thread took 1.09x the time of one, 8 of 128 tokens on two 1.04x that of 4, and 4
    // of 256 on two 1.07x 2 of 512 (then the call is shorter than the delays the spare tasks
    // cover): chunks of 2 * kSplitMinKeys unless that leaves a thread without one.
    if (threads > 1 && rows_ < 4 * threads && longest >= kSplitMinKeys)
      chunks_ = std::min<int64_t>(
          (4 * threads + rows_ - 1) / rows_,
          std::max(longest / (2 * kSplitMinKeys), std::min(threads, longest / kSplitMinKeys)));
    partials_.assign(static_cast<size_t>(rows_ * chunks_ * c_.heads), Partial{});
    acc_.assign(static_cast<size_t>(rows_ * chunks_ * c_.heads * c_.dv), 0.0f);
    decoded_.assign(static_cast<size_t>(rows_ * chunks_), 0);
    const int64_t tasks = rows_ * chunks_;
    core::runtime::ParallelFor(tasks + side_tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t task = t0; task < t1; ++task) task < tasks ? RunTask(task) : side(task - tasks);
    });
    core::runtime::ParallelFor(rows_, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) MergeRow(row);
    });
    size_t decoded = 0;
    for (size_t d : decoded_) decoded += d;
    return decoded;
  }

  size_t WorkspaceBytes() const {
    const int64_t threads = core::runtime::IntraOpThreads();
    return partials_.size() * sizeof(Partial) + acc_.size() * sizeof(float) +
           decoded_.size() * sizeof(size_t) +
           static_cast<size_t>(std::min(threads, rows_ * chunks_) * PerTaskScratch()) *
               sizeof(float);
  }

 private:
  // Scores, rescale factors and decode buffers of one task (floats).
  int64_t PerTaskScratch() const { return kKeyBlock * (c_.group + c_.dk + c_.dv) + c_.group; }

  struct Slice {
    const Page* page;
    int64_t r0, n;
  };
  struct Group {
    Slice slices[kKeyBlock];
    int count = 0;
  };

  // Points `rows` (head kh of a slice, `keys` or values, width d) at the same head's rows of
  // `next` (the next group's slice at the same place) for the kernels to prefetch line by
  // line as they read (math::CodeRows::ahead): asked for in one burst per block instead, the
  // reads stalled the arithmetic and the two did not overlap on one core (FLOAT 32k 28 -> 21
  // ms, FLOAT16 18.5 -> 10 ms). Pages read through a SlicePlan prefetch kAheadBytes ahead
  // instead (SlicePlan::ForHead); this serves the pages asked per head. False (the caller
  // prefetches `next` itself) when the kernels cannot: another code, fewer rows, no AVX-512.
  static bool Ahead(const Slice* next, bool keys, int64_t pb, int64_t kh, int64_t d,
                    ops::math::CodeRows* rows) {
    if (next == nullptr || next->n < rows->rows || !ops::math::PrefetchesAhead(*rows, d))
      return false;
    ops::math::CodeRows n;
    const PageView& view = keys ? next->page->key : next->page->value;
    if (!view.CodeRowsAt(pb, kh, next->r0, rows->rows, &n) || n.code != rows->code ||
        !ops::math::PrefetchesAhead(n, d))
      return false;
    rows->ahead = ops::math::RunBytes(n);
    return true;
  }

  // What every KV head of a slice reads, worked out once per group when the page holds every
  // head with one code, scale and zero point (else `uniform` is false and each head asks its
  // page): head 0's rows here and in the next group's slice, for the kernels to read and to
  // prefetch (null: the caller prefetches); head h's are h head strides further. Asking the
  // page (and Ahead) per head and slice cost 4-5% of an INT8 step in page-record misses.
  struct SlicePlan {
    ops::math::CodeRows rows;
    int64_t head_elements = 0;
    const uint8_t* base = nullptr;  // head 0's rows here (null: the kernels cannot prefetch)
    int64_t head_step = 0;          // bytes from one head's rows to the next here
    int64_t slice_bytes = 0;        // bytes of one head's rows here (0: base is null)
    const uint8_t* ahead = nullptr;
    int64_t ahead_step = 0;  // bytes
    bool uniform = false;

    // Head kh's rows (false: not uniform, ask the page), asking the kernels to prefetch the
    // rows of the head `distance` heads later: in this slice, or past the last head in the
    // next group's slice (none when there is no such slice).
    bool ForHead(int64_t kh, int64_t heads, int64_t distance, ops::math::CodeRows* out,
                 bool* ahead_set) const {
      if (!uniform) return false;
      *out = rows;
      out->first += kh * head_elements;
      const int64_t to = kh + distance;
      const uint8_t* at = to < heads
                              ? (base == nullptr ? nullptr : base + to * head_step)
                              : (ahead == nullptr ? nullptr : ahead + (to - heads) * ahead_step);
      if (at != nullptr) {
        out->ahead = at;
        *ahead_set = true;
      }
      return true;
    }
  };

  // Bytes from the first element of `rows` to the element `elements` further (whole-byte
  // rows: the prefetching kernels' codes).
  static int64_t ByteSpan(ops::math::CodeRows rows, int64_t elements) {
    const auto* from = static_cast<const uint8_t*>(ops::math::RunBytes(rows));
    rows.first += elements;
    return static_cast<const uint8_t*>(ops::math::RunBytes(rows)) - from;
  }

  static void Plan(const Slice& sl, const Slice* next, bool keys, int64_t pb, int64_t d,
                   SlicePlan* plan) {
    const PageView& view = keys ? sl.page->key : sl.page->value;
    plan->ahead = nullptr;
    plan->uniform = view.HeadsUniform() && view.CodeRowsAt(pb, 0, sl.r0, sl.n, &plan->rows);
    if (!plan->uniform) return;
    plan->head_elements = view.HeadElements();
    plan->base = nullptr;
    plan->slice_bytes = 0;
    if (ops::math::PrefetchesAhead(plan->rows, d)) {
      plan->base = static_cast<const uint8_t*>(ops::math::RunBytes(plan->rows));
      plan->head_step = ByteSpan(plan->rows, plan->head_elements);
      plan->slice_bytes = ByteSpan(plan->rows, sl.n * d);
    }
    if (next == nullptr || !(keys ? next->page->key : next->page->value).HeadsUniform()) return;
    ops::math::CodeRows rows = plan->rows;
    if (!Ahead(next, keys, pb, 0, d, &rows)) return;
    plan->ahead = static_cast<const uint8_t*>(rows.ahead);
    // The bytes of one head of the next slice's page (the rows at `ahead` start a byte).
    rows.data = rows.ahead;
    rows.first = 0;
    plan->ahead_step = ByteSpan(rows, (keys ? next->page->key : next->page->value).HeadElements());
  }

  void RunTask(int64_t task) {
    using ops::math::CodeRows;
    const int64_t row = task / chunks_, chunk = task % chunks_;
    const int64_t i = row % c_.len, b = row / c_.len, g = c_.group, dk = c_.dk, dv = c_.dv;
    const auto [lo, hi] = c_.Visible(b, i);
    const PagedAttention::RowPast& rp = c_.Row(b);
    const int64_t pb = c_.PageBatch(b);  // b's index inside its pages
    const int64_t span = (hi - lo + chunks_ - 1) / chunks_;
    const int64_t t0 = std::min(hi, lo + chunk * span), t1 = std::min(hi, t0 + span);
    Partial* parts = &partials_[static_cast<size_t>(task * c_.heads)];
    float* outs = &acc_[static_cast<size_t>(task * c_.heads * dv)];
    size_t& decoded = decoded_[static_cast<size_t>(task)];
    // Scores, and rows decoded from pages the code-domain kernels cannot read (uninitialised:
    // every row is written before it is read).
    std::unique_ptr<float[]> scratch(new float[static_cast<size_t>(PerTaskScratch())]);
    float* scores = scratch.get();
    float* rescale = scores + kKeyBlock * g;
    float* kbuf = rescale + g;
    float* vbuf = kbuf + kKeyBlock * dk;
    // The block of KV head kh: scores of its g query heads, online softmax, value sums.
    auto step = [&](int64_t kh, const TokenBlock& blk) {
      Partial* part = parts + kh * g;
      float* out = outs + kh * g * dv;
      ops::math::GroupCodeDots(c_.Query(b, kh * g, i), c_.len * dk, g, blk.keys, blk.runs, dk,
                               scores, kKeyBlock);
      for (int64_t j = 0; j < g; ++j)
        rescale[j] = Softmax(part[j], scores + j * kKeyBlock, blk.tokens);
      ops::math::GroupCodeWeightedRowSums(scores, kKeyBlock, g, blk.values, blk.runs, dv, rescale,
                                          out, dv);
    };
    auto dense = [](const float* rows, int64_t n) {
      return CodeRows{ops::math::RowCode::kFloat, rows, 0, n, 1.0f, 0.0f};
    };
    // Past pages: groups of consecutive pages of at most kKeyBlock visible tokens (a longer
    // page alone, in slices of kKeyBlock rows).
    TokenBlock blk;
    const int64_t past_end = std::min(t1, rp.past);
    // The next group of pages from token t (page pi holds t); advances t and pi.
    auto next_group = [&](int64_t& t, size_t& pi, Group& gr) {
      gr.count = 0;
      int64_t tokens = 0;
      while (t < past_end && tokens < kKeyBlock) {
        const Page& pg = *rp.pages[pi];
        const int64_t r0 = t - pg.start;
        const int64_t n = std::min({kKeyBlock - tokens, pg.length - r0, past_end - t});
        gr.slices[gr.count++] = {&pg, r0, n};
        tokens += n;
        t += n;
        if (t == pg.start + pg.length) ++pi;
      }
    };
    // The rows the next block will read, asked for while this one is computed (the
    // hardware prefetcher restarts at every 4 KiB page and every head's rows): by the
    // kernels as they go where Ahead can point them there, else here.
    auto prefetch = [&](const Group& gr, int from, int64_t kh) {
      for (int k = from; k < gr.count; ++k) {
        gr.slices[k].page->key.Prefetch(pb, kh, gr.slices[k].r0, gr.slices[k].n);
        gr.slices[k].page->value.Prefetch(pb, kh, gr.slices[k].r0, gr.slices[k].n);
      }
    };
    Group groups[2];
    SlicePlan key_plans[kKeyBlock], value_plans[kKeyBlock];
    int64_t t = t0;
    size_t pi = t < past_end ? rp.PageAt(t) : 0;
    next_group(t, pi, groups[0]);
    for (int cur = 0; groups[cur].count > 0; cur ^= 1) {
      const Group& gr = groups[cur];
      next_group(t, pi, groups[cur ^ 1]);
      const Group& nx = groups[cur ^ 1];
      // Each slice's rows for head 0, worked out once for every head of the group.
      int64_t head_bytes = 0;
      for (int k = 0; k < gr.count; ++k) {
        const Slice* next = k < nx.count ? &nx.slices[k] : nullptr;
        Plan(gr.slices[k], next, true, pb, dk, &key_plans[k]);
        Plan(gr.slices[k], next, false, pb, dv, &value_plans[k]);
        head_bytes += key_plans[k].slice_bytes + value_plans[k].slice_bytes;
      }
      // The kernels prefetch the rows this many heads later (kAheadBytes).
      const int64_t distance =
          head_bytes == 0
              ? c_.kv_heads
              : std::clamp<int64_t>((kAheadBytes + head_bytes - 1) / head_bytes, 1, c_.kv_heads);
      for (int64_t kh = 0; kh < c_.kv_heads; ++kh) {
        prefetch(nx, gr.count, kh);  // the next group's slices past this one's
        blk.runs = 0;
        blk.tokens = 0;
        for (int k = 0; k < gr.count; ++k) {
          const Slice& sl = gr.slices[k];
          const Slice* next = k < nx.count ? &nx.slices[k] : nullptr;
          CodeRows& kr = blk.keys[blk.runs];
          CodeRows& vr = blk.values[blk.runs];
          bool key_ahead = false, value_ahead = false;
          if (!key_plans[k].ForHead(kh, c_.kv_heads, distance, &kr, &key_ahead)) {
            if (sl.page->key.CodeRowsAt(pb, kh, sl.r0, sl.n, &kr))
              key_ahead = Ahead(next, true, pb, kh, dk, &kr);
            else
              kr = dense(sl.page->key.Rows(pb, kh, sl.r0, sl.n, kbuf + blk.tokens * dk), sl.n);
          }
          if (!value_plans[k].ForHead(kh, c_.kv_heads, distance, &vr, &value_ahead)) {
            if (sl.page->value.CodeRowsAt(pb, kh, sl.r0, sl.n, &vr))
              value_ahead = Ahead(next, false, pb, kh, dv, &vr);
            else
              vr = dense(sl.page->value.Rows(pb, kh, sl.r0, sl.n, vbuf + blk.tokens * dv), sl.n);
          }
          if (next != nullptr && !(key_ahead && value_ahead)) {
            if (!key_ahead) next->page->key.Prefetch(pb, kh, next->r0, next->n);
            if (!value_ahead) next->page->value.Prefetch(pb, kh, next->r0, next->n);
          }
          // The spec's dequantized_bytes: FLOAT bytes of the visible quantized tokens, per
          // query (what reading them as FLOAT stands for, in registers or in a buffer).
          if (sl.page->key.quantized()) decoded += static_cast<size_t>(sl.n * dk) * sizeof(float);
          if (sl.page->value.quantized()) decoded += static_cast<size_t>(sl.n * dv) * sizeof(float);
          ++blk.runs;
          blk.tokens += sl.n;
        }
        step(kh, blk);
      }
    }
    // The current tokens, as FLOAT; those stored quantized count as their decoded reads.
    for (t = std::max(t0, rp.past); t < t1;) {
      const int64_t n = std::min(kKeyBlock, t1 - t), r = t - rp.past;
      for (int64_t kh = 0; kh < c_.kv_heads; ++kh) {
        if (rp.key_format.affine()) decoded += static_cast<size_t>(n * dk) * sizeof(float);
        if (rp.value_format.affine()) decoded += static_cast<size_t>(n * dv) * sizeof(float);
        blk.keys[0] = dense(c_.CurrentKey(b, kh, r), n);
        blk.values[0] = dense(c_.CurrentValue(b, kh, r), n);
        blk.runs = 1;
        blk.tokens = n;
        step(kh, blk);
      }
      t += n;
    }
  }

  // One online-softmax step of one head over a block of raw scores (every token is live:
  // visibility is decided by the ranges, not by a mask): the scores become the block's
  // weights; returns the factor the head's partial output must be multiplied by.
  float Softmax(Partial& p, float* sc, int64_t n) const {
    const float block_max = ops::math::ScaleAddMax(sc, n, c_.scale, nullptr);
    float r = 1.0f;
    if (ops::math::MaxMoves(block_max, p.max)) {
      r = p.max == kNegInf ? 0.0f : std::exp(p.max - block_max);
      p.sum *= r;
      p.max = block_max;
    }
    p.sum += static_cast<float>(ops::math::VecExpShiftSum(sc, p.max, sc, n));
    return r;
  }

  // Merges the chunks of each head of `row` (batch, query) by log-sum-exp and writes Y
  // (zeros when nothing is visible, which only a window of a non-causal call can cause).
  void MergeRow(int64_t row) {
    const int64_t i = row % c_.len, b = row / c_.len, dv = c_.dv;
    for (int64_t h = 0; h < c_.heads; ++h) {
      auto at = [&](int64_t ch) {
        return static_cast<size_t>((row * chunks_ + ch) * c_.heads + h);
      };
      float max = kNegInf;
      for (int64_t ch = 0; ch < chunks_; ++ch) max = ops::math::NanMax(max, partials_[at(ch)].max);
      float* dst = y_ + ((b * c_.heads + h) * c_.len + i) * dv;
      std::fill(dst, dst + dv, 0.0f);
      if (max == kNegInf) continue;
      float sum = 0;
      for (int64_t ch = 0; ch < chunks_; ++ch) {
        const Partial& p = partials_[at(ch)];
        if (p.max == kNegInf) continue;
        const float r = std::exp(p.max - max);
        sum += p.sum * r;
        ops::math::Axpy(r, &acc_[at(ch) * static_cast<size_t>(dv)], dst, dv);
      }
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < dv; ++d) dst[d] *= inv;
    }
  }

  const Call& c_;
  float* y_;
  int64_t rows_ = 0, chunks_ = 1;
  std::vector<Partial> partials_;
  std::vector<float> acc_;
  std::vector<size_t> decoded_;
};

// The token-at-a-time path for narrow heads (below a vector's width the blocked path's
// buffers cost more than they save): per (batch, head, query), one partial output for the
// past pages and one for the current tokens, each with its running max and sum, merged by
// log-sum-exp. Elements are decoded as they are read. Returns the scratch bytes (2 * dv).
size_t SmallAttention(const Call& c, float* y, size_t* decoded) {
  std::vector<float> scratch(static_cast<size_t>(2 * c.dv));
  float* parts[2] = {scratch.data(), scratch.data() + c.dv};
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.len; ++i) {
        const int64_t kh = h / c.group;
        const float* q = c.Query(b, h, i);
        const auto [lo, hi] = c.Visible(b, i);
        const PagedAttention::RowPast& rp = c.Row(b);
        Partial state[2];
        for (float* o : parts) std::fill(o, o + c.dv, 0.0f);
        auto add = [&](int part, auto key_at, auto value_at) {
          float s = 0;
          for (int64_t d = 0; d < c.dk; ++d) s += q[d] * key_at(d);
          s *= c.scale;
          Partial& p = state[part];
          float* o = parts[part];
          const float m = std::max(p.max, s);
          const float r = p.max == kNegInf ? 0.0f : std::exp(p.max - m);
          const float w = std::exp(s - m);
          p.sum = p.sum * r + w;
          for (int64_t d = 0; d < c.dv; ++d) o[d] = o[d] * r + w * value_at(d);
          p.max = m;
        };
        for (int64_t t = lo; t < std::min(hi, rp.past); ++t) {
          const Page& pg = *rp.pages[rp.PageAt(t)];
          const int64_t r = t - pg.start;
          if (pg.key.quantized()) *decoded += static_cast<size_t>(c.dk) * sizeof(float);
          if (pg.value.quantized()) *decoded += static_cast<size_t>(c.dv) * sizeof(float);
          add(
              0, [&](int64_t d) { return pg.key.At(c.PageBatch(b), kh, r, d); },
              [&](int64_t d) { return pg.value.At(c.PageBatch(b), kh, r, d); });
        }
        for (int64_t t = std::max(lo, rp.past); t < hi; ++t) {
          const float* kr = c.CurrentKey(b, kh, t - rp.past);
          const float* vr = c.CurrentValue(b, kh, t - rp.past);
          if (rp.key_format.affine()) *decoded += static_cast<size_t>(c.dk) * sizeof(float);
          if (rp.value_format.affine()) *decoded += static_cast<size_t>(c.dv) * sizeof(float);
          add(
              1, [&](int64_t d) { return kr[d]; }, [&](int64_t d) { return vr[d]; });
        }
        float* dst = y + ((b * c.heads + h) * c.len + i) * c.dv;
        const float m = std::max(state[0].max, state[1].max);
        std::fill(dst, dst + c.dv, 0.0f);
        if (m == kNegInf) continue;
        float sum = 0;
        for (int part = 0; part < 2; ++part) {
          if (state[part].max == kNegInf) continue;
          const float r = std::exp(state[part].max - m);
          sum += state[part].sum * r;
          for (int64_t d = 0; d < c.dv; ++d) dst[d] += r * parts[part][d];
        }
        for (int64_t d = 0; d < c.dv; ++d) dst[d] /= sum;
      }
  return scratch.size() * sizeof(float);
}

void CheckFinite(const FloatInput& in, int64_t numel, const std::string& where) {
  // An integer OR of "exponent all ones" flags (vectorised, unlike a loop that may throw at
  // each element: a 128-token prompt's Q/K/V took 10% of its call); the element is looked
  // for only when one is there.
  uint32_t non_finite = 0;
  for (int64_t e = 0; e < numel; ++e) {
    uint32_t bits;
    std::memcpy(&bits, in.data + e, sizeof bits);
    non_finite |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (non_finite == 0) return;
  for (int64_t e = 0; e < numel; ++e)
    OL_CHECK(std::isfinite(in.data[e]), ErrorCode::kInvalidArgument,
             where + " holds a non-finite value at element " + std::to_string(e));
}

}  // namespace

PagedAttention::PagedAttention(const core::runtime::KernelContext&, FormatSelector select_formats)
    : select_formats_(std::move(select_formats)), memo_(std::make_shared<PageMemo>()) {}

RuntimeValue PagedAttention::EmptyCache() {
  std::vector<RuntimeValue::Field> fields;
  fields.emplace_back("blocks", RuntimeValue::Sequence(RuntimeSequence()));
  return RuntimeValue::Struct(std::string(), std::move(fields));
}

RuntimeValue PagedAttention::AssembleRows(std::vector<RuntimeValue> caches) {
  return RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(caches)));
}

std::vector<RuntimeValue> PagedAttention::SplitRows(const RuntimeValue& rows) {
  OL_CHECK(rows.is_sequence(), ErrorCode::kInvalidArgument,
           std::string("PagedAttention::SplitRows: expected a sequence of row caches, got a ") +
               RuntimeValue::KindName(rows.kind()));
  return rows.elements().ToVector();
}

void PagedAttention::Configure(const NodeProto& node) {
  where_ = core::runtime::NodeLabel(node);
  for (const auto& a : node.attribute())
    OL_CHECK(a.name() == "block_size" || a.name() == "max_tokens" || a.name() == "is_causal" ||
                 a.name() == "left_window_size",
             ErrorCode::kInvalidModel,
             where_ + ": unsupported attribute '" + a.name() +
                 "' (PagedAttention takes block_size, max_tokens, is_causal, left_window_size)");
  OL_CHECK(node.input_size() <= 4, ErrorCode::kInvalidModel,
           where_ + ": takes Q, K, V, past; a fifth input (an attention mask) is not supported");
  OL_CHECK(
      node.output_size() <= 2, ErrorCode::kInvalidModel,
      where_ + ": produces Y and present, not " + std::to_string(node.output_size()) + " outputs");
  block_size_ = core::runtime::AttrInt(node, "block_size", 16);
  max_tokens_ = core::runtime::AttrInt(node, "max_tokens", 4096);
  const int64_t causal = core::runtime::AttrInt(node, "is_causal", 1);
  left_window_size_ = core::runtime::AttrInt(node, "left_window_size", -1);
  OL_CHECK(block_size_ > 0, ErrorCode::kInvalidModel,
           where_ + ": block_size must be positive, got " + std::to_string(block_size_));
  OL_CHECK(max_tokens_ > 0, ErrorCode::kInvalidModel,
           where_ + ": max_tokens must be positive, got " + std::to_string(max_tokens_));
  OL_CHECK(causal == 0 || causal == 1, ErrorCode::kInvalidModel,
           where_ + ": is_causal must be 0 or 1, got " + std::to_string(causal));
  OL_CHECK(left_window_size_ >= -1, ErrorCode::kInvalidModel,
           where_ + ": left_window_size must be -1 (unbounded) or >= 0, got " +
               std::to_string(left_window_size_));
  is_causal_ = causal == 1;
}

// "past" for a single cache, "past[3]" for batch row 3's cache (built on failure only).
std::string PagedAttention::PastName(int64_t row) const {
  std::string name = where_ + ": past";
  if (row >= 0) {
    name += '[';
    name += std::to_string(row);
    name += ']';
  }
  return name;
}

void PagedAttention::AnalysePages(const RuntimeValue& cache, int64_t row, RowPast& rp,
                                  Call& c) const {
  auto cache_name = [&] {
    return row < 0 ? where_ + ": past"
                   : PastName(row) + " (row " + std::to_string(row) + " of the batch's caches)";
  };
  // A single cache's pages hold every batch row; a row cache's, its row alone.
  const int64_t page_batch = row < 0 ? c.batch : 1;
  if (FindKnown(cache, page_batch, rp, c)) return;
  // The blocks' fields are checked below for the blocks the memo has not seen: a memo hit is
  // the same (immutable) block, checked when first read. Checking every block on every call
  // chased each page's field list through memory a batched step had evicted (issue 15).
  const auto items = ops::ai_rt::CacheBlocks(cache, cache_name(), /*check_blocks=*/false);
  rp.pages.resize(items.size());
  rp.blocks.resize(items.size());
  std::lock_guard<std::mutex> lock(memo_->mutex);
  for (size_t i = 0; i < items.size(); ++i) {
    // Messages are built only on failure: no string per page per call.
    auto where = [&] { return PastName(row) + ".blocks[" + std::to_string(i) + "]"; };
    auto it = memo_->entries.find(items[i].get());
    std::shared_ptr<const Page> shared;
    if (it != memo_->entries.end() && it->second.block.lock() == items[i]) {
      shared = it->second.page;
    } else {
      if (!core::runtime::IsPagedCacheBlock(*items[i]))
        ops::ai_rt::RefusePagedCache(cache, cache_name());
      shared = std::make_shared<const Page>(ops::ai_rt::ReadCachePage(*items[i], where()));
      memo_->entries[items[i].get()] = {items[i], shared};
      ++c.stats.validated_pages;
    }
    const Page& page = *shared;
    // What depends on this call: the position in the sequence and the input shapes.
    OL_CHECK(page.start == rp.past, ErrorCode::kInvalidArgument,
             where() + ": start " + std::to_string(page.start) + " is not contiguous (expected " +
                 std::to_string(rp.past) + ")");
    const Shape& kd = page.key.dims();
    const Shape& vd = page.value.dims();
    OL_CHECK(kd[0] == page_batch && vd[0] == page_batch && kd[1] == c.kv_heads &&
                 vd[1] == c.kv_heads && kd[3] == c.dk && vd[3] == c.dv,
             ErrorCode::kInvalidArgument,
             where() + ": key " + ShapeToString(kd) + " and value " + ShapeToString(vd) +
                 " pages do not fit K/V of [" + std::to_string(page_batch) + ", " +
                 std::to_string(c.kv_heads) + ", *, " + std::to_string(c.dk) + "/" +
                 std::to_string(c.dv) + "]" + (row < 0 ? "" : " (one batch row per row cache)"));
    rp.past += page.length;
    rp.pages[i] = &page;
    rp.blocks[i] = items[i].get();
  }
  memo_->Prune();
}

bool PagedAttention::FindKnown(const RuntimeValue& cache, int64_t page_batch, RowPast& rp,
                               const Call& c) const {
  if (!cache.is_struct()) return false;
  std::shared_ptr<const KnownPages> known;
  {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    auto it = memo_->known.find(cache.fields_ptr().get());
    if (it == memo_->known.end() || it->second.cache.lock() != cache.fields_ptr()) return false;
    known = it->second.pages;
  }
  // Checked against other inputs' shapes: a mismatch takes the full path, which names it.
  if (known->page_batch != page_batch || known->kv_heads != c.kv_heads || known->dk != c.dk ||
      known->dv != c.dv)
    return false;
  rp.pages = known->pages;
  rp.blocks = known->blocks;
  rp.past = known->past;
  return true;
}

void PagedAttention::RememberPresent(const RuntimeValue& present, const RowPast& rp,
                                     int64_t extended, size_t first_new, const Call& c) const {
  auto known = std::make_shared<KnownPages>();
  known->pages = rp.pages;
  known->blocks = rp.blocks;
  known->past = rp.past + c.len;
  known->page_batch = c.per_row ? 1 : c.batch;
  known->kv_heads = c.kv_heads, known->dk = c.dk, known->dv = c.dv;
  const auto& seq = present.fields().front().second.elements();
  // The changed blocks' handles (the memo holds them weakly): the last leaf's, or all.
  std::vector<std::shared_ptr<const RuntimeValue>> items;
  const size_t changed = seq.size() - first_new + (extended > 0 ? 1 : 0);
  const RuntimeSequence::Node* leaf = seq.root().get();
  while (leaf != nullptr && !leaf->leaf) leaf = leaf->children.back().get();
  if (leaf != nullptr && leaf->items.size() >= changed) {
    items.assign(leaf->items.end() - static_cast<std::ptrdiff_t>(changed), leaf->items.end());
  } else if (changed > 0) {
    items = ops::ai_rt::CacheBlocks(present, where_);
    items.erase(items.begin(), items.end() - static_cast<std::ptrdiff_t>(changed));
  }
  // The changed blocks' pages, built before the lock (it is taken per row per step).
  std::vector<std::shared_ptr<const Page>> pages(items.size());
  for (size_t at = 0; at < items.size(); ++at) {
    if (at == 0 && extended > 0) {  // the same payloads, `extended` more valid rows
      auto page = std::make_shared<Page>(*known->pages.back());
      page->length += extended;
      pages[at] = std::move(page);
      known->pages.back() = pages[at].get();
      known->blocks.back() = items[at].get();
    } else {
      pages[at] = std::make_shared<const Page>(ops::ai_rt::ReadCachePage(*items[at], where_));
      known->pages.push_back(pages[at].get());
      known->blocks.push_back(items[at].get());
    }
  }
  std::lock_guard<std::mutex> lock(memo_->mutex);
  for (size_t at = 0; at < items.size(); ++at)
    memo_->entries[items[at].get()] = {items[at], std::move(pages[at])};
  memo_->known[present.fields_ptr().get()] = {present.fields_ptr(), std::move(known)};
  memo_->Prune();
}

void PagedAttention::AnalysePast(const RuntimeValue& past, const Tensor& k, const Tensor& v,
                                 const TailOf& tail_of, Call& c) const {
  c.per_row = past.is_sequence();
  if (c.per_row) {
    const RuntimeSequence& caches = past.elements();
    OL_CHECK(static_cast<int64_t>(caches.size()) == c.batch, ErrorCode::kInvalidArgument,
             where_ + ": past holds " + std::to_string(caches.size()) +
                 " row caches but Q/K/V have batch " + std::to_string(c.batch) +
                 " (a sequence past has one paged cache per batch row)");
  }
  c.rows.resize(static_cast<size_t>(c.per_row ? c.batch : 1));
  for (size_t r = 0; r < c.rows.size(); ++r) {
    RowPast& rp = c.rows[r];
    const int64_t row = c.per_row ? static_cast<int64_t>(r) : -1;
    AnalysePages(c.per_row ? past.elements()[r] : past, row, rp, c);
    OL_CHECK(rp.past + c.len <= max_tokens_, ErrorCode::kInvalidArgument,
             PastName(row) + ": " + std::to_string(rp.past) + " retained + " +
                 std::to_string(c.len) + " new tokens exceed max_tokens " +
                 std::to_string(max_tokens_));
    // The selector sees the K/V of the row (every row for a single cache) and its length.
    Formats formats{};
    if (select_formats_) {
      if (!c.per_row) {
        formats = select_formats_(k, v, rp.past);
      } else {
        auto row_of = [&](const Tensor& t) {
          const int64_t n = t.numel() / c.batch;
          const auto* base = static_cast<const std::byte*>(t.raw_data());
          const size_t bytes = static_cast<size_t>(n) * core::StorageBytes(t.dtype(), 1);
          return Tensor::Borrow(t.name(), t.dtype(), {1, t.dim(1), t.dim(2), t.dim(3)},
                                base + r * bytes, t.owner());
        };
        formats = select_formats_(row_of(k), row_of(v), rp.past);
      }
    }
    rp.key_format = ToPageFormat(formats.key);
    rp.value_format = ToPageFormat(formats.value);
    ops::ai_rt::CheckPageFormat(rp.key_format, where_ + ": key format");
    ops::ai_rt::CheckPageFormat(rp.value_format, where_ + ": value format");
    rp.tail = tail_of(row);
  }
}

PagedAttention::Result PagedAttention::Run(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const RuntimeValue& past) const {
  return Run(q, k, v, past, core::runtime::DefaultAllocator());
}

PagedAttention::Result PagedAttention::Run(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const RuntimeValue& past, Allocator& allocator) const {
  return Run(q, k, v, past, allocator, core::runtime::PagedTail::kNone);
}

PagedAttention::Result PagedAttention::Run(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const RuntimeValue& past, Allocator& allocator,
                                           core::runtime::PagedTail tail) const {
  return RunWith(q, k, v, past, allocator, [tail](int64_t) { return tail; });
}

PagedAttention::Result PagedAttention::RunWith(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const RuntimeValue& past, Allocator& allocator,
                                               const TailOf& tail_of) const {
  const char* names[3] = {"Q", "K", "V"};
  const Tensor* inputs[3] = {&q, &k, &v};
  Tensor dense[3];       // Q, K, V contiguous (the inputs themselves when they are)
  FloatInput floats[3];  // and as FLOAT: converted once, checked and computed on
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = *inputs[i];
    OL_CHECK(t.dtype() == DataType::kFloat || t.dtype() == DataType::kFloat16 ||
                 t.dtype() == DataType::kBFloat16,
             ErrorCode::kInvalidArgument,
             where_ + ": " + names[i] + " must be FLOAT, FLOAT16 or BFLOAT16, got " +
                 core::DataTypeName(t.dtype()));
    OL_CHECK(t.rank() == 4, ErrorCode::kInvalidArgument,
             where_ + ": " + names[i] + " must be [batch, heads, length, head_size], got " +
                 ShapeToString(t.shape()));
    dense[i] = t.contiguous() ? t : t.Contiguous();
    floats[i] = AsFloat(dense[i]);
    CheckFinite(floats[i], t.numel(), where_ + ": " + names[i]);
  }
  Call c;
  c.kernel = this;
  c.batch = q.dim(0), c.heads = q.dim(1), c.len = q.dim(2), c.dk = q.dim(3);
  c.kv_heads = k.dim(1), c.dv = v.dim(3);
  OL_CHECK(k.dim(0) == c.batch && v.dim(0) == c.batch && k.dim(2) == c.len && v.dim(2) == c.len &&
               v.dim(1) == c.kv_heads && k.dim(3) == c.dk && c.dk > 0 && c.dv > 0 &&
               c.kv_heads > 0 && c.heads % c.kv_heads == 0,
           ErrorCode::kInvalidArgument,
           where_ + ": Q " + ShapeToString(q.shape()) + ", K " + ShapeToString(k.shape()) + ", V " +
               ShapeToString(v.shape()) +
               " must share batch and length, K/V their heads, Q/K their head size, and Q's "
               "heads must be a multiple of K/V's");
  c.group = c.heads / c.kv_heads;
  c.scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
  AnalysePast(past, dense[1], dense[2], tail_of, c);
  c.q = std::move(floats[0]);
  c.k = std::move(floats[1]);
  c.v = std::move(floats[2]);
  const size_t converted = (c.q.owned.size() + c.k.owned.size() + c.v.owned.size()) * sizeof(float);

  Result result;
  Tensor y("Y", q.dtype(), {c.batch, c.heads, c.len, c.dv}, allocator);
  std::vector<float> y_float;
  float* yp = y.dtype() == DataType::kFloat ? y.mutable_data<float>() : nullptr;
  if (yp == nullptr) {
    y_float.resize(static_cast<size_t>(y.numel()));
    yp = y_float.data();
  }
  // Each row's present: its cache with the current tokens appended, built beside the
  // attention when there are several rows and no byte is both written and read (the appends
  // write past the pages' valid rows, the attention reads up to them). In a batched decoder
  // step the serial appends took about a third of the call (issue 15); one row's append is
  // cheaper than handing it to another thread (1-3% of a single-stream token).
  std::vector<RuntimeValue> presents(c.rows.size());
  std::vector<size_t> copied(c.rows.size(), 0);
  auto append_row = [&](int64_t r) {
    const auto i = static_cast<size_t>(r);
    presents[i] = Append(c.per_row ? past.elements()[i] : past, c.rows[i], c.per_row ? r : 0, c,
                         &copied[i], allocator);
  };
  size_t workspace = converted + y_float.size() * sizeof(float);
  bool appended = false;
  if (c.dk < kSmallHead || c.dv < kSmallHead) {
    workspace += SmallAttention(c, yp, &c.stats.dequantized_bytes);
  } else {
    BlockedAttention attention(c, yp);
    appended =
        c.rows.size() > 1 && std::all_of(c.rows.begin(), c.rows.end(), [&](const RowPast& rp) {
          return WholeByteRows(rp.key_format, c.dk) && WholeByteRows(rp.value_format, c.dv);
        });
    const auto side = static_cast<int64_t>(appended ? c.rows.size() : 0);
    c.stats.dequantized_bytes = attention.Run(side, append_row);
    workspace += attention.WorkspaceBytes();
  }
  if (!appended)
    for (size_t r = 0; r < c.rows.size(); ++r) append_row(static_cast<int64_t>(r));
  for (size_t n : copied) c.stats.copied_bytes += n;
  if (!y_float.empty()) {  // FLOAT16 / BFLOAT16 Q: Y in Q's type
    auto* out = y.mutable_data<uint16_t>();
    for (size_t e = 0; e < y_float.size(); ++e)
      out[e] = y.dtype() == DataType::kFloat16 ? core::FloatToHalf(y_float[e])
                                               : core::FloatToBFloat16(y_float[e]);
  }
  c.stats.peak_workspace_bytes = workspace;

  if (!c.per_row)
    result.present = std::move(presents.front());
  else  // each row cache extended by its own tokens; the sequence keeps past's type
    result.present = RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(presents)),
                                            past.sequence_elem_type());
  result.y = std::move(y);
  result.statistics = c.stats;
  return result;
}

RuntimeValue PagedAttention::Append(const RuntimeValue& cache, const RowPast& rp, int64_t row,
                                    const Call& c, size_t* copied, Allocator& allocator) const {
  using core::runtime::PagedTail;
  RuntimeSequence seq = cache.fields().front().second.elements();
  // A single cache's pages take every batch row's tokens; a row cache's, row `row`'s.
  const int64_t batch = c.per_row ? 1 : c.batch;
  const float* k0 = c.k.data + row * c.kv_heads * c.len * c.dk;
  const float* v0 = c.v.data + row * c.kv_heads * c.len * c.dv;
  auto rows = [&](int64_t t0) {  // the current K and V from token t0 on
    return std::pair{
        ops::ai_rt::RowSource{k0 + t0 * c.dk, c.kv_heads * c.len * c.dk, c.len * c.dk},
        ops::ai_rt::RowSource{v0 + t0 * c.dv, c.kv_heads * c.len * c.dv, c.len * c.dv}};
  };
  int64_t t0 = 0, extended = 0;
  const size_t first_new = seq.size();
  if (rp.tail == PagedTail::kExclusive && !rp.pages.empty()) {
    // Nobody else can see the last page: fill its spare rows when it has the same formats.
    const Page& last = *rp.pages.back();
    const RuntimeValue& block = *rp.blocks.back();
    const ops::ai_rt::PageFormat* kf = ops::ai_rt::WritablePageFormat(block.field("key"));
    const ops::ai_rt::PageFormat* vf = ops::ai_rt::WritablePageFormat(block.field("value"));
    const int64_t n = std::min(last.key.capacity() - last.length, c.len);
    if (kf != nullptr && vf != nullptr && *kf == rp.key_format && *vf == rp.value_format && n > 0) {
      const auto [ks, vs] = rows(0);
      ops::ai_rt::WriteRows(block.field("key"), ks, last.length, n, copied);
      ops::ai_rt::WriteRows(block.field("value"), vs, last.length, n, copied);
      seq.Set(seq.size() - 1, ops::ai_rt::MakeBlock(last.start, last.length + n, block.field("key"),
                                                    block.field("value")));
      t0 = extended = n;
    }
  }
  for (; t0 < c.len; t0 += block_size_) {
    const int64_t n = std::min(block_size_, c.len - t0);
    // In a state's run the page keeps room to be filled by the next calls.
    const int64_t capacity = rp.tail == PagedTail::kNone ? n : block_size_;
    const auto [ks, vs] = rows(t0);
    seq.PushBack(
        ops::ai_rt::MakeBlock(rp.past + t0, n,
                              ops::ai_rt::EncodePage(rp.key_format, ks, batch, c.kv_heads, capacity,
                                                     c.dk, n, allocator, copied),
                              ops::ai_rt::EncodePage(rp.value_format, vs, batch, c.kv_heads,
                                                     capacity, c.dv, n, allocator, copied)));
  }
  RuntimeValue present = ops::ai_rt::WithBlocks(cache, std::move(seq));
  RememberPresent(present, rp, extended, first_new, c);
  return present;
}

void PagedAttention::Compute(KernelCall& call) const {
  // What each cache's last page allows, from the run's lease (a state's, or RunRows').
  auto tail_of = [&call](int64_t row) {
    if (!call.has_context()) return core::runtime::PagedTail::kNone;
    return row < 0 ? call.context().ClaimPagedTail(call, 3, 1)
                   : call.context().ClaimPagedRowTail(call, 3, 1, static_cast<size_t>(row));
  };
  Result r = RunWith(call.input(0), call.input(1), call.input(2), call.input_value(3),
                     call.allocator(), tail_of);
  if (call.output_wanted(0)) call.SetOutput(0, std::move(r.y));
  if (call.output_wanted(1)) call.SetOutputValue(1, std::move(r.present));
}

}  // namespace onnx_light::onnx_kernels::kernel

namespace onnx_light::ops {
using PagedAttention = onnx_kernels::kernel::PagedAttention;
OL_KERNEL_FACTORY(PagedAttention)
}  // namespace onnx_light::ops
