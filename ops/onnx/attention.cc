// ONNX Attention (opsets 23, 24, 25) on CPU.
//
// Semantics follow the onnx reference implementation (onnx/reference/ops/op_attention.py),
// including the bottom-right (offset-aware) causal alignment errata: query i of the current
// block attends key j iff j <= i + offset, offset = past length (or nonpad_kv_seqlen[b] - Sq).
//
// The computation streams over keys in blocks with an online softmax: no [Sq, total] score
// matrix is built (unless qk_matmul_output is requested, which needs exactly that). Keys
// and values are read in place from past_* and the new K/V (no concatenation for the math);
// present_* are written only when wanted. Rows (batch, head, query) run in parallel; when
// there are few rows and a long cache (decode), the key range is also split across tasks
// and the partial softmax states are merged with a log-sum-exp (flash-decoding).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "executor/attributes.h"
#include "executor/runtime_context.h"
#include "ops/kernel_factory.h"
#include "ops/math/kv_append.h"
#include "ops/math/vector_ops.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kKeyBlock = 64;       // keys scored per online-softmax step
constexpr int64_t kSplitMinKeys = 512;  // below this a row is never split

// Dot products and y += a * x: the shared SIMD helpers (ops/math/vector_ops.h).
using math::Axpy;
using math::Dot;

// ---- element conversion -----------------------------------------------------------------

float LoadAsFloat(DataType type, const void* data, int64_t i) {
  switch (type) {
    case DataType::kFloat:
      return static_cast<const float*>(data)[i];
    case DataType::kDouble:
      return static_cast<float>(static_cast<const double*>(data)[i]);
    case DataType::kFloat16:
      return core::HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBFloat16:
      return core::BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kInt8:
      return static_cast<const int8_t*>(data)[i];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(data)[i];
    case DataType::kUint16:
      return static_cast<const uint16_t*>(data)[i];
    case DataType::kInt32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DataType::kUint32:
      return static_cast<float>(static_cast<const uint32_t*>(data)[i]);
    case DataType::kInt64:
      return static_cast<float>(static_cast<const int64_t*>(data)[i]);
    case DataType::kUint64:
      return static_cast<float>(static_cast<const uint64_t*>(data)[i]);
    default:
      return 0;
  }
}

void StoreFromFloat(DataType type, void* data, int64_t i, float v) {
  switch (type) {
    case DataType::kFloat:
      static_cast<float*>(data)[i] = v;
      break;
    case DataType::kDouble:
      static_cast<double*>(data)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = core::FloatToHalf(v);
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = core::FloatToBFloat16(v);
      break;
    default:
      break;
  }
}

bool IsAttentionFloat(DataType t) {
  return t == DataType::kFloat || t == DataType::kFloat16 || t == DataType::kBFloat16 ||
         t == DataType::kDouble;
}

// A [batch, heads, seq, head_size] view over 4D ([B,H,S,D]) or 3D ([B,S,H*D]) storage.
struct HeadView {
  const void* data = nullptr;
  DataType type = DataType::kFloat;
  int64_t batch = 0, heads = 0, seq = 0, head_size = 0;
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;  // in elements

  static HeadView Of(const Tensor& t, int64_t heads_3d) {
    HeadView v;
    v.data = t.raw_data();
    v.type = t.dtype();
    v.batch = t.dim(0);
    if (t.rank() == 4) {
      v.heads = t.dim(1);
      v.seq = t.dim(2);
      v.head_size = t.dim(3);
      v.seq_stride = v.head_size;
      v.head_stride = v.seq * v.head_size;
      v.batch_stride = v.heads * v.head_stride;
    } else {
      v.heads = heads_3d;
      v.seq = t.dim(1);
      v.head_size = heads_3d > 0 ? t.dim(2) / heads_3d : 0;
      v.head_stride = v.head_size;
      v.seq_stride = t.dim(2);
      v.batch_stride = v.seq * v.seq_stride;
    }
    return v;
  }
  int64_t Offset(int64_t b, int64_t h, int64_t s) const {
    return b * batch_stride + h * head_stride + s * seq_stride;
  }
};

// Keys (or values) of one (batch, kv head): the past rows followed by the new rows. Float
// sources are read in place; other types are converted once per (batch, head) into `scratch`.
struct KeyRows {
  const float* past = nullptr;
  const float* current = nullptr;
  int64_t past_len = 0, past_stride = 0, current_stride = 0;
  const float* Row(int64_t j) const {
    return j < past_len ? past + j * past_stride : current + (j - past_len) * current_stride;
  }
};

// Running online-softmax state of one query row over a key range.
struct Partial {
  float max = kNegInf;
  float sum = 0;
  std::vector<float> acc;  // sum_j exp(s_j - max) * v_j
};

class Attention final : public core::runtime::KernelBase {
 public:
  explicit Attention(const core::runtime::KernelContext&) {}

 protected:
  void Configure(const NodeProto& node) override {
    using namespace core::runtime;
    is_causal_ = AttrInt(node, "is_causal", 0) != 0;
    q_num_heads_ = AttrInt(node, "q_num_heads", 0);
    kv_num_heads_ = AttrInt(node, "kv_num_heads", 0);
    qk_mode_ = AttrInt(node, "qk_matmul_output_mode", 0);
    has_scale_ = HasAttribute(node, "scale");
    scale_ = AttrFloat(node, "scale", 1.0f);
    softcap_ = AttrFloat(node, "softcap", 0.0f);
    left_window_ = AttrInt(node, "left_window_size", -1);
    right_window_ = AttrInt(node, "right_window_size", -1);
    if (qk_mode_ < 0 || qk_mode_ > 3)
      Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) +
                                                ": qk_matmul_output_mode must be 0..3, got " +
                                                std::to_string(qk_mode_));
    if (left_window_ < -1 || right_window_ < -1)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": window sizes must be -1 or nonnegative");
  }

 public:
  void Compute(KernelCall& call) const override;
  // past_key/past_value may be append-capacity caches: strided views, read block by block.
  bool ReadsStridedInput(size_t index) const override { return index == 4 || index == 5; }

 private:
  bool is_causal_ = false;
  int64_t q_num_heads_ = 0, kv_num_heads_ = 0, qk_mode_ = 0;
  bool has_scale_ = false;
  float scale_ = 1.0f, softcap_ = 0.0f;
  int64_t left_window_ = -1, right_window_ = -1;
};

// Converts a head view's rows to contiguous float rows [batch, heads, seq, head_size] when
// the source is not FLOAT (FLOAT sources are used in place).
std::vector<float> ToFloatRows(const HeadView& v) {
  std::vector<float> out(static_cast<size_t>(v.batch * v.heads * v.seq * v.head_size));
  size_t o = 0;
  for (int64_t b = 0; b < v.batch; ++b)
    for (int64_t h = 0; h < v.heads; ++h)
      for (int64_t s = 0; s < v.seq; ++s) {
        const int64_t base = v.Offset(b, h, s);
        for (int64_t d = 0; d < v.head_size; ++d) out[o++] = LoadAsFloat(v.type, v.data, base + d);
      }
  return out;
}

// Float rows of a head view: in place for FLOAT, else from a converted copy.
struct FloatRows {
  std::vector<float> converted;
  const float* base = nullptr;
  int64_t batch_stride = 0, head_stride = 0, seq_stride = 0;

  explicit FloatRows(const HeadView& v) {
    if (v.type == DataType::kFloat) {
      base = static_cast<const float*>(v.data);
      batch_stride = v.batch_stride;
      head_stride = v.head_stride;
      seq_stride = v.seq_stride;
    } else {
      converted = ToFloatRows(v);
      base = converted.data();
      seq_stride = v.head_size;
      head_stride = v.seq * v.head_size;
      batch_stride = v.heads * head_stride;
    }
  }
  const float* Row(int64_t b, int64_t h, int64_t s) const {
    return base + b * batch_stride + h * head_stride + s * seq_stride;
  }
};

// Float rows of the (batch, head) blocks of a past cache [batch, heads, length, size] that
// is dense from axis 2: FLOAT read in place (also from a strided cache), other types
// converted once.
class PastBlocks {
 public:
  PastBlocks(const Tensor* past, int64_t blocks) {
    if (past == nullptr) return;
    const int64_t block_elems = past->dim(2) * past->dim(3);
    if (past->dtype() == DataType::kFloat) {
      const auto* base = static_cast<const float*>(past->strided_data());
      for (int64_t b = 0; b < blocks; ++b) starts_.push_back(base + past->BlockOffset(2, b));
      return;
    }
    converted_.resize(static_cast<size_t>(blocks * block_elems));
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t from = past->BlockOffset(2, b);
      float* out = converted_.data() + b * block_elems;
      for (int64_t i = 0; i < block_elems; ++i)
        out[i] = LoadAsFloat(past->dtype(), past->strided_data(), from + i);
      starts_.push_back(out);
    }
  }
  const float* Block(int64_t block) const {
    return starts_.empty() ? nullptr : starts_[static_cast<size_t>(block)];
  }

 private:
  std::vector<float> converted_;
  std::vector<const float*> starts_;
};

// Present K/V = concat(past, new rows), appended in place into a bound cache's reserved
// capacity when there is one (ops/math/kv_append.h).
void WritePresent(KernelCall& call, size_t output, size_t past_input, const Tensor* past,
                  const HeadView& current) {
  math::KvRows rows;
  rows.data = current.data;
  rows.type = current.type;
  rows.batch = current.batch;
  rows.heads = current.heads;
  rows.seq = current.seq;
  rows.head_size = current.head_size;
  rows.batch_stride = current.batch_stride;
  rows.head_stride = current.head_stride;
  rows.seq_stride = current.seq_stride;
  math::WritePresentKv(call, output, past_input, past, rows);
}

void Attention::Compute(KernelCall& call) const {
  const Tensor& q = call.input(0);
  const Tensor& k = call.input(1);
  const Tensor& v = call.input(2);
  const Tensor* mask = call.has_input(3) ? &call.input(3) : nullptr;
  const Tensor* past_key = call.has_input(4) ? &call.input(4) : nullptr;
  const Tensor* past_value = call.has_input(5) ? &call.input(5) : nullptr;
  const Tensor* nonpad = call.has_input(6) ? &call.input(6) : nullptr;

  if (!IsAttentionFloat(q.dtype()) || !IsAttentionFloat(v.dtype()))
    Throw(core::ErrorCode::kNotImplemented,
          core::runtime::NodeLabel(call.node()) + ": Attention supports FLOAT, FLOAT16, " +
              "BFLOAT16 and DOUBLE, got Q " + core::DataTypeName(q.dtype()) + " and V " +
              core::DataTypeName(v.dtype()));
  if (k.dtype() != q.dtype()) call.Fail("K must have Q's element type");
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    call.Fail("Q, K and V must all be 3D or all 4D, got shapes " +
              core::runtime::ShapeToString(q.shape()) + ", " +
              core::runtime::ShapeToString(k.shape()) + ", " +
              core::runtime::ShapeToString(v.shape()));
  if ((past_key == nullptr) != (past_value == nullptr))
    call.Fail("past_key and past_value must be given together");
  if (nonpad != nullptr && past_key != nullptr)
    call.Fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (q.rank() == 3) {
    if (q_num_heads_ <= 0 || kv_num_heads_ <= 0)
      call.Fail("3D inputs need the q_num_heads and kv_num_heads attributes");
    if (q.dim(2) % q_num_heads_ != 0 || k.dim(2) % kv_num_heads_ != 0 ||
        v.dim(2) % kv_num_heads_ != 0)
      call.Fail("hidden sizes must be divisible by the head counts");
  }

  const HeadView qv = HeadView::Of(q, q_num_heads_);
  const HeadView kv = HeadView::Of(k, kv_num_heads_);
  const HeadView vv = HeadView::Of(v, kv_num_heads_);
  const int64_t batch = qv.batch, hq = qv.heads, sq = qv.seq, dk = qv.head_size;
  const int64_t hkv = kv.heads, dv = vv.head_size;
  if (kv.batch != batch || vv.batch != batch) call.Fail("Q, K and V batch sizes differ");
  if (kv.head_size != dk) call.Fail("K head size differs from Q's");
  if (vv.heads != hkv || vv.seq != kv.seq) call.Fail("K and V head counts or lengths differ");
  if (hkv <= 0 || hq % hkv != 0)
    call.Fail("query heads (" + std::to_string(hq) + ") must be a multiple of KV heads (" +
              std::to_string(hkv) + ")");
  const int64_t past_len = past_key ? past_key->dim(2) : 0;
  if (past_key) {
    if (past_key->rank() != 4 || past_value->rank() != 4 || past_key->dim(0) != batch ||
        past_key->dim(1) != hkv || past_key->dim(3) != dk || past_value->dim(0) != batch ||
        past_value->dim(1) != hkv || past_value->dim(2) != past_len || past_value->dim(3) != dv)
      call.Fail("past_key " + core::runtime::ShapeToString(past_key->shape()) + " / past_value " +
                core::runtime::ShapeToString(past_value->shape()) +
                " do not match K/V heads and head sizes");
    if (past_key->dtype() != k.dtype() || past_value->dtype() != v.dtype())
      call.Fail("past_key/past_value element types must match K/V");
  }
  const int64_t total = past_len + kv.seq;
  const int64_t group = hq / hkv;
  const float scale = has_scale_ ? scale_ : 1.0f / std::sqrt(static_cast<float>(dk));

  // Per-batch causal/window offset.
  std::vector<int64_t> offset(static_cast<size_t>(batch), past_len);
  std::vector<int64_t> valid_keys(static_cast<size_t>(batch), total);
  if (nonpad != nullptr) {
    if (nonpad->numel() != batch) call.Fail("nonpad_kv_seqlen must have one length per batch");
    const auto lens = nonpad->ToInt64Vector();
    for (int64_t b = 0; b < batch; ++b) {
      offset[static_cast<size_t>(b)] = lens[static_cast<size_t>(b)] - sq;
      valid_keys[static_cast<size_t>(b)] = std::min<int64_t>(lens[static_cast<size_t>(b)], total);
    }
  }

  // Mask broadcast to [batch, hq, sq, total]; a shorter last dimension is padded (masked).
  std::vector<float> mask_values;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  int64_t mask_last = 0;
  if (mask) {
    const int64_t r = mask->rank();
    if (r < 1 || r > 4) call.Fail("attn_mask must have rank 1 to 4");
    const int64_t want[4] = {batch, hq, sq, total};
    int64_t stride = 1;
    for (int64_t i = r - 1; i >= 0; --i) {
      const int64_t axis = 4 - r + i;
      const int64_t d = mask->dim(i);
      const bool ok = axis == 3 ? d <= total : (d == 1 || d == want[axis]);
      if (!ok)
        call.Fail("attn_mask of shape " + core::runtime::ShapeToString(mask->shape()) +
                  " does not broadcast to [" + std::to_string(batch) + ", " + std::to_string(hq) +
                  ", " + std::to_string(sq) + ", " + std::to_string(total) + "]");
      mask_strides[axis] = d == 1 && axis != 3 ? 0 : stride;
      if (axis == 3) mask_last = d;
      stride *= d;
    }
    mask_values.resize(static_cast<size_t>(mask->numel()));
    const bool is_bool = mask->dtype() == DataType::kBool;
    for (int64_t i = 0; i < mask->numel(); ++i)
      mask_values[static_cast<size_t>(i)] = is_bool
                                                ? (mask->data<uint8_t>()[i] ? 0.0f : kNegInf)
                                                : LoadAsFloat(mask->dtype(), mask->raw_data(), i);
  }

  // Additive bias of (b, h, i, j): mask + causal + window + padding; -inf = not attended.
  auto bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float {
    if (j >= valid_keys[static_cast<size_t>(b)]) return kNegInf;
    const int64_t pos = i + offset[static_cast<size_t>(b)];
    if (is_causal_ && j > pos) return kNegInf;
    if (left_window_ >= 0 && pos - j > left_window_) return kNegInf;
    if (right_window_ >= 0 && j - pos > right_window_) return kNegInf;
    if (!mask) return 0.0f;
    if (j >= mask_last) return kNegInf;
    return mask_values[static_cast<size_t>(b * mask_strides[0] + h * mask_strides[1] +
                                           i * mask_strides[2] + j * mask_strides[3])];
  };
  auto cap = [&](float s) { return softcap_ > 0 ? softcap_ * std::tanh(s / softcap_) : s; };

  // Float views of Q, K, V (in place for FLOAT).
  const FloatRows qf(qv), kf(kv), vf(vv);
  // Past caches may be strided (append capacity): each (batch, head) block is contiguous.
  // Any other layout is made dense here.
  Tensor past_key_dense, past_value_dense;
  if (past_key && !past_key->DenseFrom(2)) past_key = &(past_key_dense = past_key->Contiguous());
  if (past_value && !past_value->DenseFrom(2))
    past_value = &(past_value_dense = past_value->Contiguous());
  const PastBlocks past_k(past_key, batch * hkv), past_v(past_value, batch * hkv);
  auto rows = [&](const FloatRows& cur, const PastBlocks& past, int64_t d, int64_t b,
                  int64_t h) -> KeyRows {
    KeyRows r;
    r.past = past.Block(b * hkv + h);
    r.past_len = past_len;
    r.past_stride = d;
    r.current = cur.Row(b, h, 0);
    r.current_stride = cur.seq_stride;
    return r;
  };

  // Outputs.
  const bool want_qk = call.output_wanted(3);
  Tensor& y = q.rank() == 4 ? call.AllocateOutput(0, q.dtype(), {batch, hq, sq, dv})
                            : call.AllocateOutput(0, q.dtype(), {batch, sq, hq * dv});
  Tensor* qk_out = want_qk ? &call.AllocateOutput(3, q.dtype(), {batch, hq, sq, total}) : nullptr;
  void* y_data = y.mutable_raw_data();
  void* qk_data = qk_out ? qk_out->mutable_raw_data() : nullptr;
  auto y_index = [&](int64_t b, int64_t h, int64_t i) {
    return q.rank() == 4 ? ((b * hq + h) * sq + i) * dv : (b * sq + i) * hq * dv + h * dv;
  };

  // Work split: rows = (b, h, i); each row may be split into `chunks` key ranges.
  const int64_t num_rows = batch * hq * sq;
  const int64_t threads = call.threads();
  int64_t chunks = 1;
  if (!want_qk && num_rows < 2 * threads && total >= kSplitMinKeys)
    chunks =
        std::min<int64_t>((2 * threads + num_rows - 1) / num_rows, total / (kSplitMinKeys / 2));
  chunks = std::max<int64_t>(1, chunks);
  const int64_t chunk_len = (total + chunks - 1) / chunks;
  std::vector<Partial> partials(static_cast<size_t>(num_rows * chunks));

  auto run_piece = [&](int64_t piece) {
    const int64_t row = piece / chunks, chunk = piece % chunks;
    const int64_t i = row % sq, h = (row / sq) % hq, b = row / (sq * hq);
    const int64_t kh = h / group;
    const KeyRows keys = rows(kf, past_k, dk, b, kh);
    const KeyRows values = rows(vf, past_v, dv, b, kh);
    const float* qrow = qf.Row(b, h, i);
    Partial& p = partials[static_cast<size_t>(piece)];
    p.acc.assign(static_cast<size_t>(dv), 0.0f);
    const int64_t j_begin = chunk * chunk_len, j_end = std::min(total, j_begin + chunk_len);
    float scores[kKeyBlock];
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyBlock) {
      const int64_t n = std::min(kKeyBlock, j_end - j0);
      float block_max = kNegInf;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t j = j0 + t;
        const float bj = bias(b, h, i, j);
        float raw = kNegInf;
        if (bj != kNegInf || qk_data) raw = cap(Dot(qrow, keys.Row(j), dk) * scale);
        const float s = raw + bj;
        if (qk_data) {
          const int64_t at = ((b * hq + h) * sq + i) * total + j;
          if (qk_mode_ <= 1)
            StoreFromFloat(q.dtype(), qk_data, at, raw);
          else if (qk_mode_ == 2)
            StoreFromFloat(q.dtype(), qk_data, at, s);
        }
        scores[t] = bj == kNegInf ? kNegInf : s;
        block_max = std::max(block_max, scores[t]);
      }
      if (block_max == kNegInf) continue;
      if (block_max > p.max) {  // rescale what was accumulated under the old maximum
        const float r = p.max == kNegInf ? 0.0f : std::exp(p.max - block_max);
        p.sum *= r;
        for (float& a : p.acc) a *= r;
        p.max = block_max;
      }
      // The block's weights in one vector pass (masked keys: e^-inf = 0, skipped below).
      float weights[kKeyBlock];
      p.sum += static_cast<float>(math::VecExpShiftSum(scores, p.max, weights, n));
      for (int64_t t = 0; t < n; ++t)
        if (scores[t] != kNegInf) Axpy(weights[t], values.Row(j0 + t), p.acc.data(), dv);
    }
  };
  call.ParallelFor(num_rows * chunks, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t piece = p0; piece < p1; ++piece) run_piece(piece);
  });

  // Merge chunks (log-sum-exp) and write Y; fully masked rows give zeros.
  auto merge_row = [&](int64_t row) {
    const int64_t i = row % sq, h = (row / sq) % hq, b = row / (sq * hq);
    float max = kNegInf;
    for (int64_t c = 0; c < chunks; ++c)
      max = std::max(max, partials[static_cast<size_t>(row * chunks + c)].max);
    std::vector<float> out(static_cast<size_t>(dv), 0.0f);
    float sum = 0;
    if (max != kNegInf) {
      for (int64_t c = 0; c < chunks; ++c) {
        const Partial& p = partials[static_cast<size_t>(row * chunks + c)];
        if (p.max == kNegInf) continue;
        const float r = std::exp(p.max - max);
        sum += p.sum * r;
        for (int64_t d = 0; d < dv; ++d)
          out[static_cast<size_t>(d)] += p.acc[static_cast<size_t>(d)] * r;
      }
      for (float& o : out) o /= sum;
    }
    const int64_t at = y_index(b, h, i);
    for (int64_t d = 0; d < dv; ++d)
      StoreFromFloat(q.dtype(), y_data, at + d, out[static_cast<size_t>(d)]);
    if (qk_data && qk_mode_ == 3) {  // probabilities need the final max and sum
      const KeyRows keys = rows(kf, past_k, dk, b, h / group);
      for (int64_t j = 0; j < total; ++j) {
        const float bj = bias(b, h, i, j);
        float prob = 0.0f;
        if (max != kNegInf && bj != kNegInf)
          prob = std::exp(cap(Dot(qf.Row(b, h, i), keys.Row(j), dk) * scale) + bj - max) / sum;
        StoreFromFloat(q.dtype(), qk_data, ((b * hq + h) * sq + i) * total + j, prob);
      }
    }
  };
  call.ParallelFor(num_rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) merge_row(row);
  });

  if (call.output_wanted(1)) WritePresent(call, 1, 4, past_key, kv);
  if (call.output_wanted(2)) WritePresent(call, 2, 5, past_value, vv);
}

}  // namespace

OL_KERNEL_FACTORY(Attention)

}  // namespace onnx_light::ops
