// ai.rt::PagedAttention (spec "Optional heterogeneous paged KV"): attention of Q over a
// paged KV cache `past` plus the current K/V, returning Y and `present` = past + the current
// tokens as new (or, when exclusively owned, extended) pages. Pages are never concatenated
// or converted: each page is read where it lies, in its own format, with an online softmax
// parallel over the visible tokens (partial max/sum/output merged by log-sum-exp).
//
// Cache layout (docs/paged-cache.md): struct {blocks: sequence of struct {start, length:
// INT64 scalars; key, value: payloads of logical shape [batch, kv_heads, capacity, width]}}.
// One page holds every KV head (and every batch row) of its token range, so the metadata
// does not grow with the head count; starts are contiguous from 0; `length` is the valid
// prefix of the page's capacity.
//
// Rows with their own caches (continuous batching, docs/paged-cache.md): `past` may also be
// a sequence of paged caches, one per batch row, each with its own length, pages and
// formats (payloads [1, kv_heads, capacity, width]). Row b's queries sit at positions from
// its own length and attend only its own pages plus its new tokens; `present` is the
// sequence of the rows' extended caches. Assembling and splitting move owner handles.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "executor/kernel.h"
#include "executor/persistent_append.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {
class KernelContext;
}

namespace onnx_light::onnx_kernels::kernel {

using core::runtime::Allocator;
using core::runtime::KernelCall;
using core::runtime::RuntimeValue;
using core::runtime::Tensor;

class PagedAttention final : public core::runtime::KernelBase {
 public:
  // The payload format of pages appended by one execution: dense FLOAT (default), FLOAT16,
  // BFLOAT16, or affine INT8/UINT8/INT4/UINT4/INT2/UINT2 codes with a scalar scale and zero
  // point (q = saturate(round_half_even(x / scale) + zero_point)).
  struct Format {
    TensorProto::DataType storage = TensorProto::FLOAT;
    float scale = 1.0f;
    int32_t zero_point = 0;
  };
  struct Formats {
    Format key;
    Format value;
  };
  // Chooses the formats of the pages an execution appends from the current K/V and the
  // number of tokens already retained (called on every execution).
  using FormatSelector =
      std::function<Formats(const Tensor& key, const Tensor& value, int64_t past_length)>;

  struct Statistics {
    size_t copied_bytes = 0;          // new page payload bytes written (copy or conversion)
    size_t dequantized_bytes = 0;     // FLOAT bytes of visible quantized tokens, per query
    size_t peak_workspace_bytes = 0;  // numerical scratch (not Y, pages or metadata)
    size_t validated_pages = 0;       // pages whose metadata was checked by this call
  };
  struct Result {
    Tensor y;
    RuntimeValue present;
    Statistics statistics;
  };

  explicit PagedAttention(const core::runtime::KernelContext& context,
                          FormatSelector select_formats = nullptr);

  // The empty cache a request starts from: {"blocks": []}.
  static RuntimeValue EmptyCache();
  // The `past` of a batch whose row b is `caches[b]` (a sequence of the caches' handles: no
  // page is copied), and the row caches of a sequence `present` (handles again).
  static RuntimeValue AssembleRows(std::vector<RuntimeValue> caches);
  static std::vector<RuntimeValue> SplitRows(const RuntimeValue& rows);

  // The direct call: Q [B, H, L, D], K [B, Hkv, L, D], V [B, Hkv, L, Dv], past a paged cache
  // or a sequence of B row caches (AssembleRows).
  // New pages and Y come from `allocator`. Throws kInvalidArgument naming the bad input.
  Result Run(const Tensor& q, const Tensor& k, const Tensor& v, const RuntimeValue& past,
             Allocator& allocator) const;
  Result Run(const Tensor& q, const Tensor& k, const Tensor& v, const RuntimeValue& past) const;
  // The same, told what it may do with past's last page (Compute asks the running state:
  // core::runtime::PagedTail). Without a state (kNone) new pages hold just their tokens;
  // with one they get block_size rows of capacity, and kExclusive lets the call fill the
  // last page's spare rows in place instead of adding a page (for row caches: every row's;
  // in a run, Compute asks the lease for each row: PersistentValueState's or RunRows').
  Result Run(const Tensor& q, const Tensor& k, const Tensor& v, const RuntimeValue& past,
             Allocator& allocator, core::runtime::PagedTail tail) const;

  void Compute(KernelCall& call) const override;

  int64_t block_size() const { return block_size_; }
  int64_t max_tokens() const { return max_tokens_; }
  bool is_causal() const { return is_causal_; }
  int64_t left_window_size() const { return left_window_size_; }

  // Implementation types (paged_attention.cc).
  struct PageMemo;
  struct KnownPages;
  struct RowPast;
  struct Call;

 protected:
  void Configure(const NodeProto& node) override;

 private:
  // The rows' pasts (one for a single cache), their page formats and tails.
  // `tail_of(row)`: what batch row `row` (-1: the single cache) may do with its last page.
  using TailOf = std::function<core::runtime::PagedTail(int64_t row)>;
  Result RunWith(const Tensor& q, const Tensor& k, const Tensor& v, const RuntimeValue& past,
                 Allocator& allocator, const TailOf& tail_of) const;
  void AnalysePast(const RuntimeValue& past, const Tensor& k, const Tensor& v,
                   const TailOf& tail_of, Call& call) const;
  // Validated page views of `cache` (batch row `row`'s, or -1: the single cache), from the
  // memo when the page was seen before.
  void AnalysePages(const RuntimeValue& cache, int64_t row, RowPast& rp, Call& call) const;
  std::string PastName(int64_t row) const;
  // `cache` with its blocks shared and row `row`'s current tokens (every row's for a single
  // cache) appended (see Run).
  // The pages of `cache` when this kernel returned it as a present (no walk, no check).
  bool FindKnown(const RuntimeValue& cache, int64_t page_batch, RowPast& rp,
                 const Call& call) const;
  // Thread safe: Compute runs the rows' appends beside the attention (RunWith).
  RuntimeValue Append(const RuntimeValue& cache, const RowPast& rp, int64_t row, const Call& call,
                      size_t* copied_bytes, Allocator& allocator) const;
  // Records `present`'s pages: rp's, the last one extended in place by `extended` rows, then
  // the new blocks from `first_new` on.
  void RememberPresent(const RuntimeValue& present, const RowPast& rp, int64_t extended,
                       size_t first_new, const Call& call) const;

  FormatSelector select_formats_;
  int64_t block_size_ = 16;
  int64_t max_tokens_ = 4096;
  bool is_causal_ = true;
  int64_t left_window_size_ = -1;
  std::string where_ = "PagedAttention";
  std::shared_ptr<PageMemo> memo_;
};

}  // namespace onnx_light::onnx_kernels::kernel
