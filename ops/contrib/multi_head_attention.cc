// com.microsoft MultiHeadAttention on CPU (FLOAT, FLOAT16). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (contrib_ops/cpu/bert/multihead_attention.cc,
// multihead_attention_helper.h, attention_cpu_base.h), checked against onnxruntime 1.32:
// - query [B, S, N*H]; key [B, L, N*H] and value [B, L, N*Hv] (self or cross attention; the
//   onnxruntime-genai builder's `-e cpu -p fp16` decoder feeds its own concatenated,
//   head-repeated caches here, with no past); past_key/past_value [B, N, P, H] / [B, N, P, Hv].
// - present_key/present_value [B, N, P+L, H] = concat(past, the new rows): written by the
//   shared KV append (ops/math/kv_append.h), in place into a bound cache's reserved capacity,
//   so a decode step copies no prefix byte. Without wanted presents the keys and values are
//   gathered into a [B, N, P+L, H] scratch (the layout onnxruntime transposes them into).
// - scores = scale * q.k (scale 0, the default: 1/sqrt(H)) + attention_bias[b or 0, head or 0,
//   s, t] (dim 3 = P+L), then softmax over the visible keys. unidirectional = 1 with S > 1 (as
//   onnxruntime: a single query row is never masked): query s sees keys [0, P+s+1); onnxruntime
//   adds -10000 to the hidden ones, whose weight is 0 in float, so they are skipped here.
// - FLOAT16: all inputs share the query's type; new K/V rows are appended as FLOAT16 and read
//   without widening the cache (math::GroupCodeDots, 8 elements at a time in registers); Q,
//   scores and sums are FLOAT, the output is rounded once (onnxruntime rounds its FLOAT16
//   scores and probabilities: the two differ by a few FLOAT16 ulps).
// - bias [N*H + N*H + N*Hv] (FLOAT): added to the query, key and value rows before anything
//   else (presents hold the biased rows).
// - key_padding_mask INT32: [B] key lengths (keys t >= length are padding), [B, total] or
//   [B, S, total] (0 = padding). Padding keys get mask_filter_value (default -10000) added to
//   their score, as onnxruntime does (so a row whose visible keys are all padding still
//   averages them); the causal rule hides keys outright. With a past, onnxruntime 1.32's CPU
//   kernel gives undefined values, so that combination is refused.
// Refused with the node and input named: bias for FLOAT16, key_padding_mask with a past,
// past_sequence_length, cache_indirection, output qk, packed QKV/KV (key absent or 5-D) and
// 4-D key/value (past passed as key), which onnxruntime's CPU kernel refuses or the builder
// does not write.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "executor/attributes.h"
#include "ops/fused/tiled_attention.h"
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

constexpr size_t kKey = 1, kValue = 2, kBias = 3, kPaddingMask = 4, kAttentionBias = 5,
                 kPastKey = 6, kPastValue = 7;

struct Geometry {
  DataType type = DataType::kFloat;
  int64_t batch = 0, seq = 0, kv_seq = 0, heads = 0, head = 0, v_head = 0, past = 0, total = 0;
};

// Keys or values to attend: block (b * heads + h) starts at element first[block] of data.
struct KvSource {
  const void* data = nullptr;
  std::vector<int64_t> first;
};

// The new rows of a [B, L, N*width] input.
math::KvRows InputRows(const void* data, const Geometry& g, int64_t width) {
  math::KvRows r;
  r.data = data;
  r.type = g.type;
  r.batch = g.batch;
  r.heads = g.heads;
  r.seq = g.kv_seq;
  r.head_size = width;
  r.batch_stride = g.kv_seq * g.heads * width;
  r.head_stride = width;
  r.seq_stride = g.heads * width;
  return r;
}

math::RowCode CodeOf(DataType t) {
  return t == DataType::kFloat16 ? math::RowCode::kHalf : math::RowCode::kFloat;
}

// key_padding_mask: which keys of each (batch, query) row are padding.
class PaddingMask {
 public:
  PaddingMask() = default;
  PaddingMask(const Tensor& m, const Geometry& g) : data_(m.data<int32_t>()), rank_(m.rank()) {
    seq_ = g.seq;
    total_ = g.total;
  }
  explicit operator bool() const { return data_ != nullptr; }
  bool Padding(int64_t b, int64_t s, int64_t t) const {
    if (rank_ == 1) return t >= data_[b];
    const int64_t row = rank_ == 2 ? b : b * seq_ + s;
    return data_[row * total_ + t] == 0;
  }

 private:
  const int32_t* data_ = nullptr;
  size_t rank_ = 0;
  int64_t seq_ = 0, total_ = 0;
};

// Adds `bias` (one value per column) to every row of a [rows, width] FLOAT matrix.
std::vector<float> AddBias(const float* x, int64_t rows, int64_t width, const float* bias) {
  std::vector<float> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      out[static_cast<size_t>(r * width + c)] = x[r * width + c] + bias[c];
  return out;
}

}  // namespace

class MultiHeadAttention final : public core::runtime::KernelBase {
 public:
  explicit MultiHeadAttention(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override;
  // past_key/past_value may be append-capacity caches: each (batch, head) block is dense.
  bool ReadsStridedInput(size_t index) const override {
    return index == kPastKey || index == kPastValue;
  }

 protected:
  void Configure(const NodeProto& node) override;

 private:
  Geometry Validate(const KernelCall& call) const;
  void ValidatePast(const KernelCall& call, Geometry& g) const;
  void ValidateBiasAndMask(const KernelCall& call, const Geometry& g) const;
  KvSource Source(KernelCall& call, const Geometry& g, size_t output, size_t past_input,
                  const math::KvRows& rows, Tensor& present, std::vector<uint8_t>& scratch) const;
  void Attend(const KernelCall& call, const Geometry& g, const float* q, const KvSource& keys,
              const KvSource& values, float* out) const;
  // The `scale` attribute; 0 (the default) means 1/sqrt(head size).
  float Scale(const Geometry& g) const {
    return scale_ == 0.0f ? 1.0f / std::sqrt(static_cast<float>(g.head)) : scale_;
  }
  bool AttendTiled(const KernelCall& call, const Geometry& g, const float* q, const KvSource& keys,
                   const KvSource& values, float* out) const;

  int64_t num_heads_ = 0;
  float scale_ = 0.0f;
  float mask_filter_value_ = -10000.0f;
  bool unidirectional_ = false;
};

void MultiHeadAttention::Configure(const NodeProto& node) {
  using namespace core::runtime;
  num_heads_ = AttrInt(node, "num_heads", 0);
  if (num_heads_ <= 0)
    Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": num_heads must be positive");
  scale_ = AttrFloat(node, "scale", 0.0f);
  mask_filter_value_ = AttrFloat(node, "mask_filter_value", -10000.0f);
  unidirectional_ = AttrInt(node, "unidirectional", 0) != 0;
}

Geometry MultiHeadAttention::Validate(const KernelCall& call) const {
  if (call.has_input(8)) call.Fail("input 'past_sequence_length' is not supported");
  if (call.has_input(9)) call.Fail("input 'cache_indirection' is not supported");
  if (call.output_wanted(3)) call.Fail("output 'qk' is not supported");
  const Tensor& q = call.input(0);
  Geometry g;
  g.type = q.dtype();
  if (g.type != DataType::kFloat && g.type != DataType::kFloat16)
    math::ThrowUnsupportedType(call.node(), "input 'query' (FLOAT or FLOAT16)", g.type);
  if (q.rank() != 3)
    call.Fail("input 'query' must be 3-D [batch, sequence, hidden] (packed QKV is not supported)");
  if (!call.has_input(kKey) || !call.has_input(kValue))
    call.Fail("inputs 'key' and 'value' must be given (packed QKV/KV is not supported)");
  const Tensor& k = call.input(kKey);
  const Tensor& v = call.input(kValue);
  if (k.rank() != 3 || v.rank() != 3)
    call.Fail(
        "inputs 'key' and 'value' must be 3-D [batch, kv_sequence, hidden] (packed KV or "
        "a past passed as 4-D key/value is not supported)");
  g.batch = q.dim(0);
  g.seq = q.dim(1);
  g.heads = num_heads_;
  if (q.dim(2) % g.heads != 0 || v.dim(2) % g.heads != 0)
    call.Fail("hidden sizes of inputs 'query' and 'value' must be multiples of num_heads (" +
              std::to_string(g.heads) + ")");
  g.head = q.dim(2) / g.heads;
  g.v_head = v.dim(2) / g.heads;
  g.kv_seq = k.dim(1);
  if (k.dtype() != g.type || v.dtype() != g.type || k.dim(0) != g.batch || k.dim(2) != q.dim(2) ||
      v.dim(0) != g.batch || v.dim(1) != g.kv_seq)
    call.Fail("inputs 'key' " + core::runtime::ShapeToString(k.shape()) + " and 'value' " +
              core::runtime::ShapeToString(v.shape()) + " must be " + core::DataTypeName(g.type) +
              " [batch, kv_sequence, hidden] with the batch and hidden size of 'query'");
  ValidatePast(call, g);
  ValidateBiasAndMask(call, g);
  if (call.has_input(kAttentionBias)) {
    const Tensor& a = call.input(kAttentionBias);
    if (a.rank() != 4 || (a.dim(0) != 1 && a.dim(0) != g.batch) ||
        (a.dim(1) != 1 && a.dim(1) != g.heads) || a.dim(2) != g.seq || a.dim(3) != g.total ||
        a.dtype() != g.type)
      call.Fail("input 'attention_bias' " + core::runtime::ShapeToString(a.shape()) + " must be " +
                core::DataTypeName(g.type) +
                " [batch or 1, num_heads or 1, sequence_length, total_sequence_length = " +
                std::to_string(g.total) + "]");
  }
  return g;
}

void MultiHeadAttention::ValidatePast(const KernelCall& call, Geometry& g) const {
  const bool has_past = call.has_input(kPastKey);
  if (has_past != call.has_input(kPastValue))
    call.Fail("inputs 'past_key' and 'past_value' must be given together");
  if (has_past) {
    const Tensor& pk = call.input(kPastKey);
    const Tensor& pv = call.input(kPastValue);
    if (pk.rank() != 4 || pv.rank() != 4 || pk.dim(0) != g.batch || pk.dim(1) != g.heads ||
        pk.dim(3) != g.head || pv.dim(0) != g.batch || pv.dim(1) != g.heads ||
        pv.dim(2) != pk.dim(2) || pv.dim(3) != g.v_head || pk.dtype() != g.type ||
        pv.dtype() != g.type)
      call.Fail("inputs 'past_key' " + core::runtime::ShapeToString(pk.shape()) +
                " and 'past_value' " + core::runtime::ShapeToString(pv.shape()) + " must be " +
                core::DataTypeName(g.type) +
                " [batch, num_heads, past, head_size] (the type of 'query')");
    g.past = pk.dim(2);
  }
  g.total = g.past + g.kv_seq;
}

void MultiHeadAttention::ValidateBiasAndMask(const KernelCall& call, const Geometry& g) const {
  if (call.has_input(kBias)) {
    const Tensor& b = call.input(kBias);
    const int64_t want = g.heads * (2 * g.head + g.v_head);
    if (g.type != DataType::kFloat)
      call.Fail("input 'bias' is supported for FLOAT only, got " + core::DataTypeName(g.type));
    if (b.dtype() != g.type || b.rank() != 1 || b.dim(0) != want)
      call.Fail("input 'bias' " + core::runtime::ShapeToString(b.shape()) + " must be " +
                core::DataTypeName(g.type) + " [" + std::to_string(want) +
                "] (query, key and value hidden sizes)");
  }
  if (!call.has_input(kPaddingMask)) return;
  const Tensor& m = call.input(kPaddingMask);
  if (g.past > 0) call.Fail("input 'key_padding_mask' together with 'past_key' is not supported");
  const bool shape_ok =
      (m.rank() == 1 && m.dim(0) == g.batch) ||
      (m.rank() == 2 && m.dim(0) == g.batch && m.dim(1) == g.total) ||
      (m.rank() == 3 && m.dim(0) == g.batch && m.dim(1) == g.seq && m.dim(2) == g.total);
  if (m.dtype() != DataType::kInt32 || !shape_ok)
    call.Fail("input 'key_padding_mask' " + core::DataTypeName(m.dtype()) + " " +
              core::runtime::ShapeToString(m.shape()) +
              " must be INT32 [batch] (key lengths), [batch, total_sequence_length = " +
              std::to_string(g.total) + "] or [batch, sequence_length, total_sequence_length]");
  if (m.rank() == 1)
    for (int64_t b = 0; b < g.batch; ++b)
      if (m.data<int32_t>()[b] < 0 || m.data<int32_t>()[b] > g.total)
        call.Fail("input 'key_padding_mask': key length " + std::to_string(m.data<int32_t>()[b]) +
                  " of batch " + std::to_string(b) + " is outside [0, " + std::to_string(g.total) +
                  "]");
}

// The present output when wanted (appended in place into a bound cache), else a dense
// [B, N, P+L, width] scratch of past and new rows.
KvSource MultiHeadAttention::Source(KernelCall& call, const Geometry& g, size_t output,
                                    size_t past_input, const math::KvRows& rows, Tensor& present,
                                    std::vector<uint8_t>& scratch) const {
  const Tensor* past = call.has_input(past_input) ? &call.input(past_input) : nullptr;
  Tensor past_dense;
  if (past != nullptr && !past->DenseFrom(2)) past = &(past_dense = past->Contiguous());
  const int64_t blocks = g.batch * g.heads, w = rows.head_size;
  KvSource src;
  src.first.resize(static_cast<size_t>(blocks));
  if (call.output_wanted(output)) {
    present = math::WritePresentKv(call, output, past_input, past, rows);
    src.data = present.strided_data();
    for (int64_t i = 0; i < blocks; ++i)
      src.first[static_cast<size_t>(i)] = present.BlockOffset(2, i);
    return src;
  }
  const size_t elem = core::StorageBytes(g.type, 1), row = static_cast<size_t>(w) * elem;
  scratch.resize(static_cast<size_t>(blocks * g.total) * row);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* block = scratch.data() + static_cast<size_t>(i * g.total) * row;
    if (g.past > 0)
      std::memcpy(block,
                  static_cast<const uint8_t*>(past->strided_data()) +
                      static_cast<size_t>(past->BlockOffset(2, i)) * elem,
                  static_cast<size_t>(g.past) * row);
    for (int64_t s = 0; s < g.kv_seq; ++s)
      std::memcpy(block + static_cast<size_t>(g.past + s) * row,
                  static_cast<const uint8_t*>(rows.data) +
                      static_cast<size_t>(rows.Offset(i / g.heads, i % g.heads, s)) * elem,
                  row);
    src.first[static_cast<size_t>(i)] = i * g.total * w;
  }
  src.data = scratch.data();
  return src;
}

// Tasks: (batch, query position, head); each reads its visible keys and values once.
void MultiHeadAttention::Attend(const KernelCall& call, const Geometry& g, const float* q,
                                const KvSource& keys, const KvSource& values, float* out) const {
  const float scale = Scale(g);
  const math::RowCode code = CodeOf(g.type);
  std::optional<math::FloatView> bias;
  if (call.has_input(kAttentionBias)) bias.emplace(call.input(kAttentionBias));
  const Shape bias_shape = bias ? call.input(kAttentionBias).shape() : Shape{1, 1, 1, 1};
  const bool causal = unidirectional_ && g.seq > 1;
  const PaddingMask pad =
      call.has_input(kPaddingMask) ? PaddingMask(call.input(kPaddingMask), g) : PaddingMask();
  math::ParallelFor(g.batch * g.seq * g.heads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> w, extra;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t head = t % g.heads, s = (t / g.heads) % g.seq, b = t / (g.heads * g.seq);
      const size_t block = static_cast<size_t>(b * g.heads + head);
      const int64_t n = causal ? std::min(g.past + s + 1, g.total) : g.total;
      float* o = out + ((b * g.seq + s) * g.heads + head) * g.v_head;
      std::fill(o, o + g.v_head, 0.0f);
      if (n == 0) continue;  // no key at all: zeros
      const float* qrow = q + ((b * g.seq + s) * g.heads + head) * g.head;
      const math::CodeRows k{code, keys.data, keys.first[block], n};
      const math::CodeRows v{code, values.data, values.first[block], n};
      w.resize(static_cast<size_t>(n));
      // FLOAT rows take the plain vector dots (no per-row code dispatch).
      const bool dense = g.type == DataType::kFloat;
      const float* kd = dense ? static_cast<const float*>(keys.data) + keys.first[block] : nullptr;
      const float* vd =
          dense ? static_cast<const float*>(values.data) + values.first[block] : nullptr;
      if (dense) {
        math::GroupDots(qrow, g.head, 1, kd, g.head, n, g.head, w.data(), n);
      } else {
        math::GroupCodeDots(qrow, g.head, 1, &k, 1, g.head, w.data(), n);
      }
      const float* brow = nullptr;  // bias[b or 0, head or 0, s, 0]
      if (bias) {
        const int64_t bb = bias_shape[0] == 1 ? 0 : b, bh = bias_shape[1] == 1 ? 0 : head;
        brow = bias->data() + ((bb * bias_shape[1] + bh) * g.seq + s) * g.total;
      }
      if (pad) {  // the bias row plus mask_filter_value on padding keys
        extra.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j)
          extra[static_cast<size_t>(j)] = (brow != nullptr ? brow[j] : 0.0f) +
                                          (pad.Padding(b, s, j) ? mask_filter_value_ : 0.0f);
        brow = extra.data();
      }
      const float max = math::ScaleAddMax(w.data(), n, scale, brow);
      const float inv = static_cast<float>(1.0 / math::VecExpShiftSum(w.data(), max, w.data(), n));
      for (int64_t j = 0; j < n; ++j) w[static_cast<size_t>(j)] *= inv;
      if (dense) {
        math::GroupWeightedRowSums(w.data(), n, 1, vd, g.v_head, n, o, g.v_head, g.v_head);
      } else {
        math::GroupCodeWeightedRowSums(w.data(), n, 1, &v, 1, g.v_head, nullptr, o, g.v_head);
      }
    }
  });
}

// Element strides {batch, head, row} of a source whose (batch, head) blocks are equally
// spaced (scratch and bound caches are); false otherwise.
bool UniformStrides(const KvSource& src, const Geometry& g, int64_t width, int64_t strides[3]) {
  const auto at = [&](int64_t b, int64_t h) {
    return src.first[static_cast<size_t>(b * g.heads + h)];
  };
  strides[0] = g.batch > 1 ? at(1, 0) - at(0, 0) : 0;
  strides[1] = g.heads > 1 ? at(0, 1) - at(0, 0) : 0;
  strides[2] = width;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t h = 0; h < g.heads; ++h)
      if (at(b, h) != at(0, 0) + b * strides[0] + h * strides[1]) return false;
  return true;
}

// FLOAT prompts: the fused attention's tiled path (ops/fused/tiled_attention.h), which scores
// whole tiles as small GEMMs, on Q and Y in [B, N, S, H] and with the causal rule and the
// bias as one additive mask (-inf hides a key, as the per-row path skips it). False (nothing
// written) when the path declines; the per-row path then runs.
bool MultiHeadAttention::AttendTiled(const KernelCall& call, const Geometry& g, const float* q,
                                     const KvSource& keys, const KvSource& values,
                                     float* out) const {
  fused::AttentionProblem p;
  if (g.type != DataType::kFloat || !fused::PrefersTiles(g.seq) ||
      !UniformStrides(keys, g, g.head, p.k_strides) ||
      !UniformStrides(values, g, g.v_head, p.v_strides))
    return false;
  const bool causal = unidirectional_ && g.seq > 1;
  std::optional<math::FloatView> bias;
  if (call.has_input(kAttentionBias)) bias.emplace(call.input(kAttentionBias));
  const Shape bs = bias ? call.input(kAttentionBias).shape() : Shape{1, 1, 1, 1};
  const PaddingMask pad =
      call.has_input(kPaddingMask) ? PaddingMask(call.input(kPaddingMask), g) : PaddingMask();
  std::vector<float> mask;
  if (causal || bias || pad) {
    // [mb, mh, S, total]: per batch when the bias or the padding differs by batch.
    const int64_t mb = bs[0] != 1 || pad ? g.batch : 1, mh = bs[1], plane = g.seq * g.total;
    mask.assign(static_cast<size_t>(mb * mh * plane), 0.0f);
    for (int64_t b = 0; b < mb; ++b)
      for (int64_t h = 0; h < mh; ++h)
        for (int64_t s = 0; s < g.seq; ++s)
          for (int64_t t = 0; t < g.total; ++t) {
            const int64_t row = ((b * mh + h) * g.seq + s) * g.total + t;
            const int64_t bias_at = (((bs[0] == 1 ? 0 : b) * bs[1] + h) * g.seq + s) * g.total + t;
            const bool hidden = causal && t >= g.past + s + 1;
            mask[static_cast<size_t>(row)] =
                hidden ? -std::numeric_limits<float>::infinity()
                       : (bias ? bias->data()[bias_at] : 0.0f) +
                             (pad && pad.Padding(b, s, t) ? mask_filter_value_ : 0.0f);
          }
    p.mask = mask.data();
    p.mask_strides[0] = mb == 1 ? 0 : mh * plane;
    p.mask_strides[1] = mh == 1 ? 0 : plane;
    p.mask_strides[2] = g.total;
    p.mask_strides[3] = 1;
  }
  // [B, S, N, H] <-> [B, N, S, H]
  const auto transpose = [&](const float* src, float* dst, int64_t width, bool to_heads) {
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t s = 0; s < g.seq; ++s)
        for (int64_t h = 0; h < g.heads; ++h) {
          const int64_t bsnh = ((b * g.seq + s) * g.heads + h) * width;
          const int64_t bnsh = ((b * g.heads + h) * g.seq + s) * width;
          const float* from = src + (to_heads ? bsnh : bnsh);
          std::copy(from, from + width, dst + (to_heads ? bnsh : bsnh));
        }
  };
  std::vector<float> qt(static_cast<size_t>(g.batch * g.seq * g.heads * g.head));
  std::vector<float> yt(static_cast<size_t>(g.batch * g.seq * g.heads * g.v_head));
  transpose(q, qt.data(), g.head, true);
  p.batch = g.batch;
  p.heads = p.kv_heads = g.heads;
  p.queries = g.seq;
  p.keys = g.total;
  p.dk = g.head;
  p.dv = g.v_head;
  p.q = qt.data();
  p.k = static_cast<const float*>(keys.data);
  p.v = static_cast<const float*>(values.data);
  p.scale = Scale(g);
  p.y = yt.data();
  if (!fused::TiledAttention(p)) return false;
  transpose(yt.data(), out, g.v_head, false);
  return true;
}

void MultiHeadAttention::Compute(KernelCall& call) const {
  const Geometry g = Validate(call);
  math::FloatView q_view(call.input(0));
  const float* q = q_view.data();
  const void* k_rows = call.input(kKey).raw_data();
  const void* v_rows = call.input(kValue).raw_data();
  std::vector<float> q_biased, k_biased, v_biased;
  if (call.has_input(kBias)) {  // FLOAT (Validate): [q | k | v] biases
    const float* bias = call.input(kBias).data<float>();
    const int64_t qk = g.heads * g.head;
    q_biased = AddBias(q, g.batch * g.seq, qk, bias);
    k_biased = AddBias(static_cast<const float*>(k_rows), g.batch * g.kv_seq, qk, bias + qk);
    v_biased = AddBias(static_cast<const float*>(v_rows), g.batch * g.kv_seq, g.heads * g.v_head,
                       bias + 2 * qk);
    q = q_biased.data();
    k_rows = k_biased.data();
    v_rows = v_biased.data();
  }
  std::vector<uint8_t> k_scratch, v_scratch;
  Tensor present_k, present_v;
  const KvSource keys =
      Source(call, g, 1, kPastKey, InputRows(k_rows, g, g.head), present_k, k_scratch);
  const KvSource values =
      Source(call, g, 2, kPastValue, InputRows(v_rows, g, g.v_head), present_v, v_scratch);
  Tensor& y = call.AllocateOutput(0, g.type, {g.batch, g.seq, g.heads * g.v_head});
  if (y.numel() == 0) return;
  math::FloatSink out(y);
  if (!AttendTiled(call, g, q, keys, values, out.data()))
    Attend(call, g, q, keys, values, out.data());
  out.Finish();
}

OL_KERNEL_FACTORY(MultiHeadAttention)

}  // namespace onnx_light::ops
