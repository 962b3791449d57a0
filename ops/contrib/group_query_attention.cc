// com.microsoft GroupQueryAttention on CPU (FLOAT, FLOAT16, BFLOAT16). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (contrib_ops/cpu/bert/group_query_attention.cc,
// group_query_attention_helper.h, gqa_attention_base.h), checked against onnxruntime 1.32:
// - query [B, S, Nq*H] with key/value [B, S, Nkv*H], or packed QKV [B, S, (Nq + 2 Nkv) * H]
//   with key and value absent; past_key/past_value [B, Nkv, S_past, H] (BNSH).
// - seqlens_k[b] = total length of batch b - 1; total_sequence_length (scalar) gives the
//   present length P = max(total_sequence_length, S_past). The call is the first prompt when
//   S == total_sequence_length (every batch's past length is then 0), else a decode step
//   (S == 1) or, with batch 1, a subsequent prompt; past length of b = seqlens_k[b] + 1 - S.
// - present = past rows [0, past_b) then the S new rows, the rest of [0, P) zero. When that is
//   exactly concat(past, new) (every past_b == S_past and P == S_past + S) the present is
//   written by the shared KV append (ops/math/kv_append.h): in place into a bound cache's
//   reserved capacity, so a decode step never copies the cache.
// - do_rotary: Q and K rotated (ops/contrib/rotary.h), rotary_dim = 2 * cos_cache dim 1, at
//   position p(b, s): first prompt base + s with base = position_ids[0] (0 when absent, for
//   every batch); otherwise position_ids[b, s], or past_b + s when absent.
// - query s of batch b attends keys [lo, min(past_b + s + 1, total_b)) of the present (a padded
//   first-prompt row sees its batch's keys); local_window_size w > 0 keeps the last w of them
//   (onnxruntime 1.32; older CPU kernels kept w + 1). Scores are scaled (scale, default
//   1/sqrt(H)), soft-capped (softcap * tanh(x / softcap) when softcap > 0),
//   plus attention_bias[b or 0, head or 0, s, key] (dim 3 = total_sequence_length), then
//   softmax; head_sink[head] adds a logit exp(sink) to the denominator (smooth_softmax: a zero
//   sink; head_sink wins when both are given, as in onnxruntime; smooth_softmax -1, the schema
//   default, is off).
// - FLOAT16/BFLOAT16 (onnxruntime 1.32's CPU kernel has FLOAT16 only): all inputs but seqlens_k,
//   total_sequence_length and position_ids share the query's type. The caches stay 16-bit:
//   new K/V rows (K rounded after rotation) are appended in their type, and the attention
//   reads the 16-bit rows directly (math::GroupCodeDots, widened 8 elements at a time in
//   registers); Q, scores and sums are FLOAT, the output is rounded once.
// Refused with the node and input named: output_qk, qk_output != 0, k_scale/v_scale (quantized
// caches), q_norm_weight/k_norm_weight, position_ids not [batch, sequence_length].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/rotary.h"
#include "ops/kernel_factory.h"
#include "ops/math/code_dot.h"
#include "ops/math/common.h"
#include "ops/math/kv_append.h"
#include "ops/math/vector_ops.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

constexpr size_t kPastKey = 3, kPastValue = 4, kSeqlensK = 5, kTotalSeq = 6, kCos = 7, kSin = 8,
                 kPositionIds = 9, kAttentionBias = 10, kHeadSink = 11;

// The call's geometry after validation.
struct Geometry {
  DataType type = DataType::kFloat;  // of query, key, value, caches and output
  int64_t batch = 0, seq = 0, nq = 0, nkv = 0, head = 0, total = 0;
  int64_t past_len = 0, present_len = 0, rotary_dim = 0;
  bool packed = false, first_prompt = false;
  std::vector<int64_t> past_b, total_b;  // per batch
};

// A row source: element (b, h, s, 0) at data + (b*bs + h*hs + s*ss) elements of `type`.
math::KvRows Rows(const void* data, DataType type, int64_t batch, int64_t heads, int64_t seq,
                  int64_t head, int64_t bs, int64_t hs, int64_t ss) {
  math::KvRows r;
  r.data = data;
  r.type = type;
  r.batch = batch;
  r.heads = heads;
  r.seq = seq;
  r.head_size = head;
  r.batch_stride = bs;
  r.head_stride = hs;
  r.seq_stride = ss;
  return r;
}

// Dense [B, S, heads, H] rows of `type` in `buf`.
math::KvRows DenseRows(void* buf, DataType type, const math::KvRows& like) {
  const int64_t h = like.head_size;
  return Rows(buf, type, like.batch, like.heads, like.seq, h, like.seq * like.heads * h, h,
              like.heads * h);
}

const void* RowPtr(const math::KvRows& r, int64_t b, int64_t h, int64_t s) {
  return static_cast<const uint8_t*>(r.data) + core::StorageBytes(r.type, r.Offset(b, h, s));
}

math::RowCode CodeOf(DataType t) {
  return t == DataType::kFloat16    ? math::RowCode::kHalf
         : t == DataType::kBFloat16 ? math::RowCode::kBFloat16
                                    : math::RowCode::kFloat;
}

// Row `pos` of a [positions, half] cos/sin cache as float (in place for FLOAT).
const float* CacheRow(const Tensor& cache, int64_t pos, int64_t half, std::vector<float>& tmp) {
  if (cache.dtype() == DataType::kFloat) return cache.data<float>() + pos * half;
  tmp.resize(static_cast<size_t>(half));
  math::ToFloat(cache.dtype(), static_cast<const uint8_t*>(cache.raw_data()) + pos * half * 2,
                tmp.data(), half);
  return tmp.data();
}

}  // namespace

class GroupQueryAttention final : public core::runtime::KernelBase {
 public:
  explicit GroupQueryAttention(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override;
  // past_key/past_value may be append-capacity caches: each (batch, head) block is dense.
  bool ReadsStridedInput(size_t index) const override {
    return index == kPastKey || index == kPastValue;
  }

 protected:
  void Configure(const NodeProto& node) override;

 private:
  Geometry Validate(const KernelCall& call) const;
  void ValidateCaches(const KernelCall& call, Geometry& g) const;
  void ValidateExtras(const KernelCall& call, const Geometry& g) const;
  std::vector<int64_t> Positions(const KernelCall& call, const Geometry& g) const;
  // Q as FLOAT rows (a converted or rotated copy in `q_buf` unless FLOAT and not rotated), K
  // and V as rows of the call's type (K rotated into `k_buf` when do_rotary).
  void Prepare(const KernelCall& call, const Geometry& g, std::vector<float>& q_buf,
               std::vector<uint8_t>& k_buf, math::KvRows& q, math::KvRows& k,
               math::KvRows& v) const;
  Tensor Present(KernelCall& call, const Geometry& g, size_t output, size_t past_input,
                 const math::KvRows& rows) const;
  void Attend(const KernelCall& call, const Geometry& g, const math::KvRows& q,
              const Tensor& present_k, const Tensor& present_v, float* out) const;
  void Weights(float* scores, int64_t n, float scale, const float* bias,
               std::optional<float> sink) const;

  int64_t num_heads_ = 0, kv_num_heads_ = 0, local_window_ = -1;
  float scale_ = 0.0f, softcap_ = 0.0f;
  bool do_rotary_ = false, interleaved_ = false, smooth_softmax_ = false;
};

void GroupQueryAttention::Configure(const NodeProto& node) {
  using namespace core::runtime;
  num_heads_ = AttrInt(node, "num_heads", 0);
  kv_num_heads_ = AttrInt(node, "kv_num_heads", 0);
  if (num_heads_ <= 0 || kv_num_heads_ <= 0 || num_heads_ % kv_num_heads_ != 0)
    Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": num_heads (" +
                                              std::to_string(num_heads_) +
                                              ") must be a positive multiple of kv_num_heads (" +
                                              std::to_string(kv_num_heads_) + ")");
  scale_ = AttrFloat(node, "scale", 0.0f);
  softcap_ = AttrFloat(node, "softcap", 0.0f);
  local_window_ = AttrInt(node, "local_window_size", -1);
  do_rotary_ = AttrInt(node, "do_rotary", 0) != 0;
  interleaved_ = AttrInt(node, "rotary_interleaved", 0) != 0;
  smooth_softmax_ = AttrInt(node, "smooth_softmax", 0) == 1;
  if (AttrInt(node, "qk_output", 0) != 0)
    Throw(core::ErrorCode::kNotImplemented, NodeLabel(node) + ": qk_output is not supported");
  if (softcap_ < 0.0f)
    Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": softcap must be >= 0");
}

Geometry GroupQueryAttention::Validate(const KernelCall& call) const {
  static const char* const kRefused[] = {"k_scale", "v_scale", "q_norm_weight", "k_norm_weight"};
  for (size_t i = 12; i < 16; ++i)
    if (call.has_input(i))
      Throw(core::ErrorCode::kNotImplemented, core::runtime::NodeLabel(call.node()) + ": input '" +
                                                  kRefused[i - 12] + "' is not supported");
  if (call.output_wanted(3))
    Throw(core::ErrorCode::kNotImplemented,
          core::runtime::NodeLabel(call.node()) + ": output 'output_qk' is not supported");
  const Tensor& q = call.input(0);
  Geometry g;
  g.type = q.dtype();
  if (!math::IsFloatType(g.type))
    math::ThrowUnsupportedType(call.node(), "input 'query' (FLOAT, FLOAT16 or BFLOAT16)", g.type);
  if (q.rank() != 3) call.Fail("input 'query' must be 3-D [batch, sequence, hidden]");
  const std::string type_name = core::DataTypeName(g.type);
  g.batch = q.dim(0);
  g.seq = q.dim(1);
  g.nq = num_heads_;
  g.nkv = kv_num_heads_;
  g.packed = !call.has_input(1);
  if (g.packed != !call.has_input(2))
    call.Fail("inputs 'key' and 'value' must both be given or both be absent (packed QKV)");
  const int64_t heads_in_query = g.packed ? g.nq + 2 * g.nkv : g.nq;
  if (q.dim(2) % heads_in_query != 0)
    call.Fail("hidden size of input 'query' is not a multiple of its " +
              std::to_string(heads_in_query) + " heads");
  g.head = q.dim(2) / heads_in_query;
  if (!g.packed) {
    const Tensor& k = call.input(1);
    const Tensor& v = call.input(2);
    const Shape want{g.batch, g.seq, g.nkv * g.head};
    if (k.dtype() != g.type || v.dtype() != g.type || k.shape() != want || v.shape() != want)
      call.Fail("inputs 'key' and 'value' must be " + type_name + " " +
                core::runtime::ShapeToString(want) + " (the type of 'query')");
  }
  ValidateCaches(call, g);
  ValidateExtras(call, g);
  return g;
}

// past_key/past_value, seqlens_k, total_sequence_length and the rotary tables.
void GroupQueryAttention::ValidateCaches(const KernelCall& call, Geometry& g) const {
  const bool has_past = call.has_input(kPastKey);
  if (has_past != call.has_input(kPastValue))
    call.Fail("inputs 'past_key' and 'past_value' must be given together");
  const std::string type_name = core::DataTypeName(g.type);
  if (has_past) {
    const Tensor& pk = call.input(kPastKey);
    const Tensor& pv = call.input(kPastValue);
    if (pk.rank() != 4 || pk.dim(0) != g.batch || pk.dim(1) != g.nkv || pk.dim(3) != g.head ||
        pv.shape() != pk.shape() || pk.dtype() != g.type || pv.dtype() != g.type)
      call.Fail("inputs 'past_key' " + core::runtime::ShapeToString(pk.shape()) +
                " and 'past_value' " + core::runtime::ShapeToString(pv.shape()) + " must be " +
                type_name + " [batch, kv_num_heads, past, head_size] (the type of 'query')");
    g.past_len = pk.dim(2);
  }
  const auto seqlens = math::IntValues(call.node(), call.input(kSeqlensK), "seqlens_k");
  if (static_cast<int64_t>(seqlens.size()) != g.batch)
    call.Fail("input 'seqlens_k' must have one value per batch");
  const int64_t total =
      math::ScalarInt(call.node(), call.input(kTotalSeq), "total_sequence_length");
  g.total = total;
  g.present_len = std::max(total, g.past_len);
  const bool subsequent = g.seq > 1 && g.seq != total;
  if (subsequent && g.batch != 1)
    call.Fail("batch size must be 1 when the sequence length > 1 and a past context is given");
  g.first_prompt = !subsequent && g.seq == total;
  if (!subsequent && !g.first_prompt && g.seq != 1)
    call.Fail("sequence length must be 1 when the call is not a prompt");
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t t = seqlens[static_cast<size_t>(b)] + 1;
    const int64_t past = g.first_prompt ? 0 : t - g.seq;
    if (t < 1 || t > g.present_len || past < 0 || past > g.past_len)
      call.Fail("input 'seqlens_k' value " + std::to_string(t - 1) + " of batch " +
                std::to_string(b) + " does not fit past length " + std::to_string(g.past_len) +
                ", sequence length " + std::to_string(g.seq) + " and total_sequence_length " +
                std::to_string(total));
    g.total_b.push_back(t);
    g.past_b.push_back(past);
  }
  if (do_rotary_) {
    if (!call.has_input(kCos) || !call.has_input(kSin))
      call.Fail("do_rotary needs inputs 'cos_cache' and 'sin_cache'");
    const Tensor& c = call.input(kCos);
    const Tensor& s = call.input(kSin);
    if (c.rank() != 2 || c.shape() != s.shape() || c.dtype() != g.type || s.dtype() != g.type ||
        2 * c.dim(1) > g.head || c.dim(0) < total)
      call.Fail("inputs 'cos_cache'/'sin_cache' " + core::runtime::ShapeToString(c.shape()) +
                " must be " + type_name + " [>= total_sequence_length, <= head_size / 2]");
    g.rotary_dim = 2 * c.dim(1);
  }
}

// position_ids, attention_bias and head_sink shapes and types (onnxruntime's checks).
void GroupQueryAttention::ValidateExtras(const KernelCall& call, const Geometry& g) const {
  if (call.has_input(kPositionIds)) {
    const Tensor& p = call.input(kPositionIds);
    if (p.rank() != 2 || p.dim(0) != g.batch || p.dim(1) != g.seq || p.dtype() != DataType::kInt64)
      call.Fail("input 'position_ids' " + core::runtime::ShapeToString(p.shape()) +
                " must be INT64 [batch, sequence_length] = " +
                core::runtime::ShapeToString(Shape{g.batch, g.seq}));
  }
  if (call.has_input(kAttentionBias)) {
    const Tensor& a = call.input(kAttentionBias);
    if (a.rank() != 4 || (a.dim(0) != 1 && a.dim(0) != g.batch) ||
        (a.dim(1) != 1 && a.dim(1) != g.nq) || a.dim(2) != g.seq || a.dim(3) != g.total ||
        a.dtype() != g.type)
      call.Fail("input 'attention_bias' " + core::runtime::ShapeToString(a.shape()) + " must be " +
                core::DataTypeName(g.type) +
                " [batch or 1, num_heads or 1, sequence_length, total_sequence_length = " +
                std::to_string(g.total) + "]");
  }
  if (call.has_input(kHeadSink)) {
    const Tensor& h = call.input(kHeadSink);
    if (h.rank() != 1 || h.dim(0) != g.nq || h.dtype() != g.type)
      call.Fail("input 'head_sink' " + core::runtime::ShapeToString(h.shape()) + " must be " +
                core::DataTypeName(g.type) + " [num_heads = " + std::to_string(g.nq) + "]");
  }
}

// The rotary position of every (b, s), checked against the cos/sin cache rows.
std::vector<int64_t> GroupQueryAttention::Positions(const KernelCall& call,
                                                    const Geometry& g) const {
  std::vector<int64_t> given;
  if (call.has_input(kPositionIds))
    given = math::IntValues(call.node(), call.input(kPositionIds), "position_ids");
  std::vector<int64_t> pos(static_cast<size_t>(g.batch * g.seq));
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t s = 0; s < g.seq; ++s) {
      const size_t i = static_cast<size_t>(b * g.seq + s);
      if (g.first_prompt)
        pos[i] = (given.empty() ? 0 : given[0]) + s;
      else
        pos[i] = given.empty() ? g.past_b[static_cast<size_t>(b)] + s : given[i];
    }
  const int64_t rows = call.input(kCos).dim(0);
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] < 0 || pos[i] >= rows)
      call.Fail("rotary position " + std::to_string(pos[i]) + " of (batch, sequence) index " +
                std::to_string(i) + (given.empty() ? "" : " (from input 'position_ids')") +
                " is outside the " + std::to_string(rows) + " rows of 'cos_cache'");
  return pos;
}

void GroupQueryAttention::Prepare(const KernelCall& call, const Geometry& g,
                                  std::vector<float>& q_buf, std::vector<uint8_t>& k_buf,
                                  math::KvRows& q, math::KvRows& k, math::KvRows& v) const {
  const void* qd = call.input(0).raw_data();
  const int64_t h = g.head;
  const size_t elem = core::StorageBytes(g.type, 1);
  if (g.packed) {
    const int64_t ss = (g.nq + 2 * g.nkv) * h, bs = g.seq * ss;
    const auto* base = static_cast<const uint8_t*>(qd);
    q = Rows(qd, g.type, g.batch, g.nq, g.seq, h, bs, h, ss);
    k = Rows(base + static_cast<size_t>(g.nq * h) * elem, g.type, g.batch, g.nkv, g.seq, h, bs, h,
             ss);
    v = Rows(base + static_cast<size_t>((g.nq + g.nkv) * h) * elem, g.type, g.batch, g.nkv, g.seq,
             h, bs, h, ss);
  } else {
    q = Rows(qd, g.type, g.batch, g.nq, g.seq, h, g.seq * g.nq * h, h, g.nq * h);
    k = Rows(call.input(1).raw_data(), g.type, g.batch, g.nkv, g.seq, h, g.seq * g.nkv * h, h,
             g.nkv * h);
    v = Rows(call.input(2).raw_data(), g.type, g.batch, g.nkv, g.seq, h, g.seq * g.nkv * h, h,
             g.nkv * h);
  }
  if (!do_rotary_ && g.type == DataType::kFloat) return;
  const std::vector<int64_t> pos = do_rotary_ ? Positions(call, g) : std::vector<int64_t>{};
  const int64_t half = g.rotary_dim / 2;
  q_buf.resize(static_cast<size_t>(g.batch * g.seq * g.nq * h));
  const math::KvRows q_out = DenseRows(q_buf.data(), DataType::kFloat, q);
  math::KvRows k_out;
  if (do_rotary_) {
    k_buf.resize(static_cast<size_t>(g.batch * g.seq * g.nkv * h) * elem);
    k_out = DenseRows(k_buf.data(), g.type, k);
  }
  std::vector<float> row(static_cast<size_t>(h)), cos_tmp, sin_tmp;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t s = 0; s < g.seq; ++s) {
      const float *cos = nullptr, *sin = nullptr;
      if (do_rotary_) {
        const int64_t p = pos[static_cast<size_t>(b * g.seq + s)];
        cos = CacheRow(call.input(kCos), p, half, cos_tmp);
        sin = CacheRow(call.input(kSin), p, half, sin_tmp);
      }
      for (int64_t hh = 0; hh < g.nq; ++hh) {  // Q: FLOAT, rotated when do_rotary
        float* out = q_buf.data() + q_out.Offset(b, hh, s);
        math::ToFloat(g.type, RowPtr(q, b, hh, s), out, h);
        if (do_rotary_) contrib::RotateRow(out, out, h, g.rotary_dim, cos, sin, interleaved_);
      }
      for (int64_t hh = 0; do_rotary_ && hh < g.nkv; ++hh) {  // K: rotated, in the call's type
        math::ToFloat(g.type, RowPtr(k, b, hh, s), row.data(), h);
        contrib::RotateRow(row.data(), row.data(), h, g.rotary_dim, cos, sin, interleaved_);
        math::FromFloat(row.data(), g.type,
                        k_buf.data() + core::StorageBytes(g.type, k_out.Offset(b, hh, s)), h);
      }
    }
  q = q_out;
  if (do_rotary_) k = k_out;
}

// The ORT layout (past rows, new rows at past_b, zeros after) unless it is a plain concat.
Tensor GroupQueryAttention::Present(KernelCall& call, const Geometry& g, size_t output,
                                    size_t past_input, const math::KvRows& rows) const {
  const Tensor* past = call.has_input(past_input) ? &call.input(past_input) : nullptr;
  Tensor past_dense;
  if (past != nullptr && !past->DenseFrom(2)) past = &(past_dense = past->Contiguous());
  bool concat = g.present_len == g.past_len + g.seq;
  for (int64_t b = 0; b < g.batch; ++b)
    concat = concat && g.past_b[static_cast<size_t>(b)] == g.past_len;
  if (concat) return math::WritePresentKv(call, output, past_input, past, rows);
  Tensor& present = call.AllocateOutput(output, g.type, {g.batch, g.nkv, g.present_len, g.head});
  auto* dst = static_cast<uint8_t*>(present.mutable_raw_data());
  std::memset(dst, 0, present.nbytes());
  const size_t elem = core::StorageBytes(g.type, 1);
  const size_t row_bytes = static_cast<size_t>(g.head) * elem;
  size_t prefix = 0;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t h = 0; h < g.nkv; ++h) {
      uint8_t* block = dst + static_cast<size_t>((b * g.nkv + h) * g.present_len) * row_bytes;
      const int64_t keep = g.past_b[static_cast<size_t>(b)];
      if (keep > 0) {
        const auto* src = static_cast<const uint8_t*>(past->strided_data()) +
                          static_cast<size_t>(past->BlockOffset(2, b * g.nkv + h)) * elem;
        std::memcpy(block, src, static_cast<size_t>(keep) * row_bytes);
        prefix += static_cast<size_t>(keep) * row_bytes;
      }
      for (int64_t s = 0; s < g.seq; ++s)
        std::memcpy(block + static_cast<size_t>(keep + s) * row_bytes, RowPtr(rows, b, h, s),
                    row_bytes);
    }
  core::runtime::RecordStorage(
      call, {.allocations = 1,
             .allocated_bytes = present.nbytes(),
             .prefix_copied_bytes = prefix,
             .append_copied_bytes = static_cast<size_t>(g.batch * g.nkv * g.seq) * row_bytes});
  return present;
}

// Tasks: (batch, query position, KV head) with up to kHeadsPerTask of the query heads that
// share the KV head, so each task reads its key and value rows once for those heads
// (math::GroupDots/GroupWeightedRowSums for FLOAT, math::GroupCodeDots/...RowSums for 16-bit
// rows, which widen them in registers).
void GroupQueryAttention::Attend(const KernelCall& call, const Geometry& g, const math::KvRows& q,
                                 const Tensor& present_k, const Tensor& present_v,
                                 float* out) const {
  constexpr int64_t kHeadsPerTask = 3;
  const int64_t group = g.nq / g.nkv, h = g.head;
  const int64_t parts = (group + kHeadsPerTask - 1) / kHeadsPerTask;
  const float scale = scale_ == 0.0f ? 1.0f / std::sqrt(static_cast<float>(h)) : scale_;
  const math::RowCode code = CodeOf(g.type);
  std::optional<math::FloatView> bias, sinks;
  if (call.has_input(kAttentionBias)) bias.emplace(call.input(kAttentionBias));
  if (call.has_input(kHeadSink)) sinks.emplace(call.input(kHeadSink));
  const Shape bias_shape = bias ? call.input(kAttentionBias).shape() : Shape{1, 1, 1, 1};
  math::ParallelFor(g.batch * g.seq * g.nkv * parts, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t part = t % parts, kv_head = (t / parts) % g.nkv;
      const int64_t s = (t / (parts * g.nkv)) % g.seq, b = t / (parts * g.nkv * g.seq);
      const int64_t h0 = kv_head * group + part * kHeadsPerTask;
      const int64_t heads = std::min(kHeadsPerTask, group - part * kHeadsPerTask);
      const int64_t block = b * g.nkv + kv_head;
      // A padded row of a first prompt (s >= total_b) sees the batch's keys [0, total_b).
      const int64_t hi =
          std::min(g.past_b[static_cast<size_t>(b)] + s + 1, g.total_b[static_cast<size_t>(b)]);
      const int64_t lo = local_window_ > 0 && hi > local_window_ ? hi - local_window_ : 0;
      const int64_t n = hi - lo;
      const auto* qrow = static_cast<const float*>(RowPtr(q, b, h0, s));
      const math::CodeRows keys{code, present_k.strided_data(),
                                present_k.BlockOffset(2, block) + lo * h, n};
      const math::CodeRows values{code, present_v.strided_data(),
                                  present_v.BlockOffset(2, block) + lo * h, n};
      scores.resize(static_cast<size_t>(heads * n));
      if (code == math::RowCode::kFloat)
        math::GroupDots(qrow, q.head_stride, heads,
                        static_cast<const float*>(keys.data) + keys.first, h, n, h, scores.data(),
                        n);
      else
        math::GroupCodeDots(qrow, q.head_stride, heads, &keys, 1, h, scores.data(), n);
      for (int64_t i = 0; i < heads; ++i) {
        const int64_t head = h0 + i;
        const float* brow = nullptr;  // bias[b or 0, head or 0, s, lo]
        if (bias) {
          const int64_t bb = bias_shape[0] == 1 ? 0 : b, bh = bias_shape[1] == 1 ? 0 : head;
          brow = bias->data() + ((bb * bias_shape[1] + bh) * g.seq + s) * g.total + lo;
        }
        std::optional<float> sink;
        if (sinks)
          sink = sinks->data()[head];
        else if (smooth_softmax_)
          sink = 0.0f;
        Weights(scores.data() + i * n, n, scale, brow, sink);
      }
      float* o = out + ((b * g.seq + s) * g.nq + h0) * h;  // the task's heads, consecutive
      std::fill(o, o + heads * h, 0.0f);
      if (code == math::RowCode::kFloat)
        math::GroupWeightedRowSums(scores.data(), n, heads,
                                   static_cast<const float*>(values.data) + values.first, h, n, o,
                                   h, h);
      else
        math::GroupCodeWeightedRowSums(scores.data(), n, heads, &values, 1, h, nullptr, o, h);
    }
  });
}

// Raw scores of one head -> softmax weights: scaled (and soft-capped), plus the bias row,
// exponentiated and normalised (a sink: an extra logit in the sum).
void GroupQueryAttention::Weights(float* sc, int64_t n, float scale, const float* bias,
                                  std::optional<float> sink) const {
  float max;
  if (softcap_ > 0.0f || bias != nullptr) {
    max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      float x = sc[j] * scale;
      if (softcap_ > 0.0f) x = softcap_ * std::tanh(x / softcap_);
      if (bias != nullptr) x += bias[j];
      sc[j] = x;
      max = math::NanMax(max, x);
    }
  } else {
    max = math::ScaleAddMax(sc, n, scale, nullptr);
  }
  if (sink) max = math::NanMax(max, *sink);
  double sum = math::VecExpShiftSum(sc, max, sc, n);
  if (sink) sum += std::exp(static_cast<double>(*sink) - max);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) sc[j] *= inv;
}

void GroupQueryAttention::Compute(KernelCall& call) const {
  const Geometry g = Validate(call);
  std::vector<float> q_buf;
  std::vector<uint8_t> k_buf;
  math::KvRows q, k, v;
  Prepare(call, g, q_buf, k_buf, q, k, v);
  const Tensor present_k = Present(call, g, 1, kPastKey, k);
  const Tensor present_v = Present(call, g, 2, kPastValue, v);
  Tensor& y = call.AllocateOutput(0, g.type, {g.batch, g.seq, g.nq * g.head});
  if (y.numel() == 0) return;
  math::FloatSink out(y);
  Attend(call, g, q, present_k, present_v, out.data());
  out.Finish();
}

OL_KERNEL_FACTORY(GroupQueryAttention)

}  // namespace onnx_light::ops
