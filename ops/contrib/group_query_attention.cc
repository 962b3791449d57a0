// com.microsoft GroupQueryAttention on CPU (FLOAT). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (contrib_ops/cpu/bert/group_query_attention.cc,
// group_query_attention_helper.h, gqa_attention_base.h):
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
// - do_rotary: Q and K rotated (ops/contrib/rotary.h) at position s (first prompt, 1 for a
//   padded row) or past_b + s, rotary_dim = 2 * cos_cache dim 1.
// - query s of batch b attends keys [lo, past_b + s] of the present; local_window_size w > 0
//   keeps the last w of them (onnxruntime 1.32; older CPU kernels kept w + 1). Scores are scaled
//   (scale, default 1/sqrt(H)), soft-capped (softcap * tanh(x / softcap) when softcap > 0), then
//   softmax (smooth_softmax: an extra zero logit in the denominator).
// Refused with the node and input named: attention_bias, head_sink, position_ids inputs,
// output_qk, qk_output != 0, element types other than FLOAT.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/rotary.h"
#include "ops/kernel_factory.h"
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

constexpr size_t kPastKey = 3, kPastValue = 4, kSeqlensK = 5, kTotalSeq = 6, kCos = 7, kSin = 8;

// The call's geometry after validation.
struct Geometry {
  int64_t batch = 0, seq = 0, nq = 0, nkv = 0, head = 0;
  int64_t past_len = 0, present_len = 0, rotary_dim = 0;
  bool packed = false, first_prompt = false;
  std::vector<int64_t> past_b, total_b;  // per batch
};

// A float row source: element (b, h, s, 0) at data + b*bs + h*hs + s*ss.
math::KvRows Rows(const float* data, int64_t batch, int64_t heads, int64_t seq, int64_t head,
                  int64_t bs, int64_t hs, int64_t ss) {
  math::KvRows r;
  r.data = data;
  r.type = DataType::kFloat;
  r.batch = batch;
  r.heads = heads;
  r.seq = seq;
  r.head_size = head;
  r.batch_stride = bs;
  r.head_stride = hs;
  r.seq_stride = ss;
  return r;
}

const float* RowPtr(const math::KvRows& r, int64_t b, int64_t h, int64_t s) {
  return static_cast<const float*>(r.data) + r.Offset(b, h, s);
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
  // Q and K after rotary (copies into `q_buf`/`k_buf` when rotating), and V, as row sources.
  void Prepare(const KernelCall& call, const Geometry& g, std::vector<float>& q_buf,
               std::vector<float>& k_buf, math::KvRows& q, math::KvRows& k, math::KvRows& v) const;
  Tensor Present(KernelCall& call, const Geometry& g, size_t output, size_t past_input,
                 const math::KvRows& rows) const;
  void Attend(const Geometry& g, const math::KvRows& q, const Tensor& present_k,
              const Tensor& present_v, float* out) const;
  void Weights(float* scores, int64_t n, float scale) const;

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
  smooth_softmax_ = AttrInt(node, "smooth_softmax", 0) != 0;
  if (AttrInt(node, "qk_output", 0) != 0)
    Throw(core::ErrorCode::kNotImplemented, NodeLabel(node) + ": qk_output is not supported");
  if (softcap_ < 0.0f)
    Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": softcap must be >= 0");
}

Geometry GroupQueryAttention::Validate(const KernelCall& call) const {
  static const char* const kRefused[] = {"position_ids", "attention_bias", "head_sink"};
  for (size_t i = 9; i < 12; ++i)
    if (call.has_input(i))
      Throw(core::ErrorCode::kNotImplemented, core::runtime::NodeLabel(call.node()) + ": input '" +
                                                  kRefused[i - 9] + "' is not supported");
  if (call.output_wanted(3))
    Throw(core::ErrorCode::kNotImplemented,
          core::runtime::NodeLabel(call.node()) + ": output 'output_qk' is not supported");
  const Tensor& q = call.input(0);
  if (q.dtype() != DataType::kFloat)
    math::ThrowUnsupportedType(call.node(), "input 'query' (only FLOAT)", q.dtype());
  if (q.rank() != 3) call.Fail("input 'query' must be 3-D [batch, sequence, hidden]");
  Geometry g;
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
    if (k.dtype() != DataType::kFloat || v.dtype() != DataType::kFloat || k.shape() != want ||
        v.shape() != want)
      call.Fail("inputs 'key' and 'value' must be FLOAT " + core::runtime::ShapeToString(want));
  }
  const bool has_past = call.has_input(kPastKey);
  if (has_past != call.has_input(kPastValue))
    call.Fail("inputs 'past_key' and 'past_value' must be given together");
  if (has_past) {
    const Tensor& pk = call.input(kPastKey);
    const Tensor& pv = call.input(kPastValue);
    if (pk.rank() != 4 || pk.dim(0) != g.batch || pk.dim(1) != g.nkv || pk.dim(3) != g.head ||
        pv.shape() != pk.shape() || pk.dtype() != DataType::kFloat ||
        pv.dtype() != DataType::kFloat)
      call.Fail("inputs 'past_key' " + core::runtime::ShapeToString(pk.shape()) +
                " and 'past_value' " + core::runtime::ShapeToString(pv.shape()) +
                " must be FLOAT [batch, kv_num_heads, past, head_size]");
    g.past_len = pk.dim(2);
  }
  const auto seqlens = math::IntValues(call.node(), call.input(kSeqlensK), "seqlens_k");
  if (static_cast<int64_t>(seqlens.size()) != g.batch)
    call.Fail("input 'seqlens_k' must have one value per batch");
  const int64_t total =
      math::ScalarInt(call.node(), call.input(kTotalSeq), "total_sequence_length");
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
    if (c.rank() != 2 || c.shape() != s.shape() || c.dtype() != DataType::kFloat ||
        s.dtype() != DataType::kFloat || 2 * c.dim(1) > g.head || c.dim(0) < total)
      call.Fail("inputs 'cos_cache'/'sin_cache' " + core::runtime::ShapeToString(c.shape()) +
                " must be FLOAT [>= total_sequence_length, <= head_size / 2]");
    g.rotary_dim = 2 * c.dim(1);
  }
  return g;
}

void GroupQueryAttention::Prepare(const KernelCall& call, const Geometry& g,
                                  std::vector<float>& q_buf, std::vector<float>& k_buf,
                                  math::KvRows& q, math::KvRows& k, math::KvRows& v) const {
  const auto* qd = call.input(0).data<float>();
  const int64_t h = g.head;
  if (g.packed) {
    const int64_t ss = (g.nq + 2 * g.nkv) * h, bs = g.seq * ss;
    q = Rows(qd, g.batch, g.nq, g.seq, h, bs, h, ss);
    k = Rows(qd + g.nq * h, g.batch, g.nkv, g.seq, h, bs, h, ss);
    v = Rows(qd + (g.nq + g.nkv) * h, g.batch, g.nkv, g.seq, h, bs, h, ss);
  } else {
    q = Rows(qd, g.batch, g.nq, g.seq, h, g.seq * g.nq * h, h, g.nq * h);
    k = Rows(call.input(1).data<float>(), g.batch, g.nkv, g.seq, h, g.seq * g.nkv * h, h,
             g.nkv * h);
    v = Rows(call.input(2).data<float>(), g.batch, g.nkv, g.seq, h, g.seq * g.nkv * h, h,
             g.nkv * h);
  }
  if (!do_rotary_) return;
  const float* cos = call.input(kCos).data<float>();
  const float* sin = call.input(kSin).data<float>();
  const int64_t half = g.rotary_dim / 2;
  // Rotated copies in [B, S, heads, H] layout.
  auto rotate = [&](const math::KvRows& src, std::vector<float>& buf) {
    buf.resize(static_cast<size_t>(src.batch * src.seq * src.heads * h));
    math::KvRows dst = Rows(buf.data(), src.batch, src.heads, src.seq, h, src.seq * src.heads * h,
                            h, src.heads * h);
    for (int64_t b = 0; b < src.batch; ++b)
      for (int64_t s = 0; s < src.seq; ++s) {
        const int64_t p = g.past_b[static_cast<size_t>(b)] + s;
        const int64_t pos = p < g.total_b[static_cast<size_t>(b)] ? p : 1;  // padded rows: 1
        for (int64_t hh = 0; hh < src.heads; ++hh)
          contrib::RotateRow(RowPtr(src, b, hh, s), buf.data() + dst.Offset(b, hh, s), h,
                             g.rotary_dim, cos + pos * half, sin + pos * half, interleaved_);
      }
    return dst;
  };
  q = rotate(q, q_buf);
  k = rotate(k, k_buf);
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
  Tensor& present =
      call.AllocateOutput(output, DataType::kFloat, {g.batch, g.nkv, g.present_len, g.head});
  float* dst = present.mutable_data<float>();
  std::memset(dst, 0, present.nbytes());
  const size_t row_bytes = static_cast<size_t>(g.head) * sizeof(float);
  size_t prefix = 0;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t h = 0; h < g.nkv; ++h) {
      float* block = dst + (b * g.nkv + h) * g.present_len * g.head;
      const int64_t keep = g.past_b[static_cast<size_t>(b)];
      if (keep > 0) {
        const float* src =
            static_cast<const float*>(past->strided_data()) + past->BlockOffset(2, b * g.nkv + h);
        std::memcpy(block, src, static_cast<size_t>(keep) * row_bytes);
        prefix += static_cast<size_t>(keep) * row_bytes;
      }
      for (int64_t s = 0; s < g.seq; ++s)
        std::memcpy(block + (keep + s) * g.head, RowPtr(rows, b, h, s), row_bytes);
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
// (math::GroupDots, math::GroupWeightedRowSums).
void GroupQueryAttention::Attend(const Geometry& g, const math::KvRows& q, const Tensor& present_k,
                                 const Tensor& present_v, float* out) const {
  constexpr int64_t kHeadsPerTask = 3;
  const int64_t group = g.nq / g.nkv, h = g.head;
  const int64_t parts = (group + kHeadsPerTask - 1) / kHeadsPerTask;
  const float scale = scale_ == 0.0f ? 1.0f / std::sqrt(static_cast<float>(h)) : scale_;
  const auto* kbase = static_cast<const float*>(present_k.strided_data());
  const auto* vbase = static_cast<const float*>(present_v.strided_data());
  math::ParallelFor(g.batch * g.seq * g.nkv * parts, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t part = t % parts, kv_head = (t / parts) % g.nkv;
      const int64_t s = (t / (parts * g.nkv)) % g.seq, b = t / (parts * g.nkv * g.seq);
      const int64_t h0 = kv_head * group + part * kHeadsPerTask;
      const int64_t heads = std::min(kHeadsPerTask, group - part * kHeadsPerTask);
      const int64_t block = b * g.nkv + kv_head;
      const int64_t hi = std::min(g.past_b[static_cast<size_t>(b)] + s + 1, g.present_len);
      const int64_t lo = local_window_ > 0 && hi > local_window_ ? hi - local_window_ : 0;
      const int64_t n = hi - lo;
      const float* keys = kbase + present_k.BlockOffset(2, block) + lo * h;
      const float* values = vbase + present_v.BlockOffset(2, block) + lo * h;
      scores.resize(static_cast<size_t>(heads * n));
      math::GroupDots(RowPtr(q, b, h0, s), q.head_stride, heads, keys, h, n, h, scores.data(), n);
      for (int64_t i = 0; i < heads; ++i) Weights(scores.data() + i * n, n, scale);
      float* o = out + ((b * g.seq + s) * g.nq + h0) * h;  // the task's heads, consecutive
      std::fill(o, o + heads * h, 0.0f);
      math::GroupWeightedRowSums(scores.data(), n, heads, values, h, n, o, h, h);
    }
  });
}

// Raw scores of one head -> softmax weights: scaled (and soft-capped), exponentiated and
// normalised (smooth softmax: an extra zero logit in the sum).
void GroupQueryAttention::Weights(float* sc, int64_t n, float scale) const {
  float max;
  if (softcap_ > 0.0f) {
    max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      sc[j] = softcap_ * std::tanh(sc[j] * scale / softcap_);
      max = std::max(max, sc[j]);
    }
  } else {
    max = math::ScaleAddMax(sc, n, scale, nullptr);
  }
  if (smooth_softmax_) max = std::max(max, 0.0f);
  double sum = math::VecExpShiftSum(sc, max, sc, n);
  if (smooth_softmax_) sum += std::exp(-static_cast<double>(max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) sc[j] *= inv;
}

void GroupQueryAttention::Compute(KernelCall& call) const {
  const Geometry g = Validate(call);
  std::vector<float> q_buf, k_buf;
  math::KvRows q, k, v;
  Prepare(call, g, q_buf, k_buf, q, k, v);
  const Tensor present_k = Present(call, g, 1, kPastKey, k);
  const Tensor present_v = Present(call, g, 2, kPastValue, v);
  Tensor& y = call.AllocateOutput(0, DataType::kFloat, {g.batch, g.seq, g.nq * g.head});
  if (y.numel() == 0) return;
  Attend(g, q, present_k, present_v, y.mutable_data<float>());
}

OL_KERNEL_FACTORY(GroupQueryAttention)

}  // namespace onnx_light::ops
