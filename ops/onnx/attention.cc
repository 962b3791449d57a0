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
#include <optional>
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

// The node's attributes (Configure).
struct AttentionAttrs {
  bool is_causal = false;
  int64_t q_num_heads = 0, kv_num_heads = 0, qk_mode = 0;
  bool has_scale = false;
  float scale = 1.0f, softcap = 0.0f;
  int64_t left_window = -1, right_window = -1;
};

class Attention final : public core::runtime::KernelBase {
 public:
  explicit Attention(const core::runtime::KernelContext&) {}

 protected:
  void Configure(const NodeProto& node) override {
    using namespace core::runtime;
    a_.is_causal = AttrInt(node, "is_causal", 0) != 0;
    a_.q_num_heads = AttrInt(node, "q_num_heads", 0);
    a_.kv_num_heads = AttrInt(node, "kv_num_heads", 0);
    a_.qk_mode = AttrInt(node, "qk_matmul_output_mode", 0);
    a_.has_scale = HasAttribute(node, "scale");
    a_.scale = AttrFloat(node, "scale", 1.0f);
    a_.softcap = AttrFloat(node, "softcap", 0.0f);
    a_.left_window = AttrInt(node, "left_window_size", -1);
    a_.right_window = AttrInt(node, "right_window_size", -1);
    if (a_.qk_mode < 0 || a_.qk_mode > 3)
      Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) +
                                                ": qk_matmul_output_mode must be 0..3, got " +
                                                std::to_string(a_.qk_mode));
    if (a_.left_window < -1 || a_.right_window < -1)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": window sizes must be -1 or nonnegative");
  }

 public:
  void Compute(KernelCall& call) const override;
  // past_key/past_value may be append-capacity caches: strided views, read block by block.
  bool ReadsStridedInput(size_t index) const override { return index == 4 || index == 5; }

 private:
  AttentionAttrs a_;
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

// The inputs of one call, checked, with their [batch, heads, seq, head_size] views.
struct Operands {
  const Tensor *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  const Tensor *past_key = nullptr, *past_value = nullptr, *nonpad = nullptr;
  HeadView qv, kv, vv;
  int64_t batch = 0, hq = 0, sq = 0, dk = 0, hkv = 0, dv = 0;
  int64_t past_len = 0, total = 0, group = 0;
};

// Element types, ranks and which optional inputs go together.
void CheckKinds(const KernelCall& call, const AttentionAttrs& a, const Operands& in) {
  const Tensor &q = *in.q, &k = *in.k, &v = *in.v;
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
  if ((in.past_key == nullptr) != (in.past_value == nullptr))
    call.Fail("past_key and past_value must be given together");
  if (in.nonpad != nullptr && in.past_key != nullptr)
    call.Fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (q.rank() == 3) {
    if (a.q_num_heads <= 0 || a.kv_num_heads <= 0)
      call.Fail("3D inputs need the q_num_heads and kv_num_heads attributes");
    if (q.dim(2) % a.q_num_heads != 0 || k.dim(2) % a.kv_num_heads != 0 ||
        v.dim(2) % a.kv_num_heads != 0)
      call.Fail("hidden sizes must be divisible by the head counts");
  }
}

// Batch, head counts, head sizes and the past caches agree.
void CheckShapes(const KernelCall& call, const Operands& in) {
  if (in.kv.batch != in.batch || in.vv.batch != in.batch)
    call.Fail("Q, K and V batch sizes differ");
  if (in.kv.head_size != in.dk) call.Fail("K head size differs from Q's");
  if (in.vv.heads != in.hkv || in.vv.seq != in.kv.seq)
    call.Fail("K and V head counts or lengths differ");
  if (in.hkv <= 0 || in.hq % in.hkv != 0)
    call.Fail("query heads (" + std::to_string(in.hq) + ") must be a multiple of KV heads (" +
              std::to_string(in.hkv) + ")");
  const Tensor *pk = in.past_key, *pv = in.past_value;
  if (pk == nullptr) return;
  if (pk->rank() != 4 || pv->rank() != 4 || pk->dim(0) != in.batch || pk->dim(1) != in.hkv ||
      pk->dim(3) != in.dk || pv->dim(0) != in.batch || pv->dim(1) != in.hkv ||
      pv->dim(2) != in.past_len || pv->dim(3) != in.dv)
    call.Fail("past_key " + core::runtime::ShapeToString(pk->shape()) + " / past_value " +
              core::runtime::ShapeToString(pv->shape()) + " do not match K/V heads and head sizes");
  if (pk->dtype() != in.k->dtype() || pv->dtype() != in.v->dtype())
    call.Fail("past_key/past_value element types must match K/V");
}

Operands ReadOperands(const KernelCall& call, const AttentionAttrs& a) {
  Operands in;
  in.q = &call.input(0);
  in.k = &call.input(1);
  in.v = &call.input(2);
  in.mask = call.has_input(3) ? &call.input(3) : nullptr;
  in.past_key = call.has_input(4) ? &call.input(4) : nullptr;
  in.past_value = call.has_input(5) ? &call.input(5) : nullptr;
  in.nonpad = call.has_input(6) ? &call.input(6) : nullptr;
  CheckKinds(call, a, in);
  in.qv = HeadView::Of(*in.q, a.q_num_heads);
  in.kv = HeadView::Of(*in.k, a.kv_num_heads);
  in.vv = HeadView::Of(*in.v, a.kv_num_heads);
  in.batch = in.qv.batch, in.hq = in.qv.heads, in.sq = in.qv.seq, in.dk = in.qv.head_size;
  in.hkv = in.kv.heads, in.dv = in.vv.head_size;
  in.past_len = in.past_key ? in.past_key->dim(2) : 0;
  CheckShapes(call, in);
  in.total = in.past_len + in.kv.seq;
  in.group = in.hq / in.hkv;
  return in;
}

// The additive bias of score (b, h, i, j): mask + causal + window + padding; -inf means the
// key is not attended. The mask is broadcast to [batch, hq, sq, total]; a shorter last
// dimension is padded (masked).
class KeyBias {
 public:
  KeyBias(const KernelCall& call, const AttentionAttrs& a, const Operands& in) : a_(a) {
    offset_.assign(static_cast<size_t>(in.batch), in.past_len);
    valid_keys_.assign(static_cast<size_t>(in.batch), in.total);
    if (in.nonpad != nullptr) ReadLengths(call, in);
    if (in.mask != nullptr) ReadMask(call, in);
  }

  float operator()(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (j >= valid_keys_[static_cast<size_t>(b)]) return kNegInf;
    const int64_t pos = i + offset_[static_cast<size_t>(b)];
    if (a_.is_causal && j > pos) return kNegInf;
    if (a_.left_window >= 0 && pos - j > a_.left_window) return kNegInf;
    if (a_.right_window >= 0 && j - pos > a_.right_window) return kNegInf;
    if (!has_mask_) return 0.0f;
    if (j >= mask_last_) return kNegInf;
    return mask_[static_cast<size_t>(b * strides_[0] + h * strides_[1] + i * strides_[2] +
                                     j * strides_[3])];
  }

 private:
  // Per-batch causal/window offset and key count from nonpad_kv_seqlen.
  void ReadLengths(const KernelCall& call, const Operands& in) {
    if (in.nonpad->numel() != in.batch)
      call.Fail("nonpad_kv_seqlen must have one length per batch");
    const auto lens = in.nonpad->ToInt64Vector();
    for (size_t b = 0; b < lens.size(); ++b) {
      offset_[b] = lens[b] - in.sq;
      valid_keys_[b] = std::min<int64_t>(lens[b], in.total);
    }
  }

  void ReadMask(const KernelCall& call, const Operands& in) {
    const Tensor& mask = *in.mask;
    const int64_t r = mask.rank();
    if (r < 1 || r > 4) call.Fail("attn_mask must have rank 1 to 4");
    const int64_t want[4] = {in.batch, in.hq, in.sq, in.total};
    int64_t stride = 1;
    for (int64_t i = r - 1; i >= 0; --i) {
      const int64_t axis = 4 - r + i;
      const int64_t d = mask.dim(i);
      const bool ok = axis == 3 ? d <= in.total : (d == 1 || d == want[axis]);
      if (!ok)
        call.Fail("attn_mask of shape " + core::runtime::ShapeToString(mask.shape()) +
                  " does not broadcast to [" + std::to_string(in.batch) + ", " +
                  std::to_string(in.hq) + ", " + std::to_string(in.sq) + ", " +
                  std::to_string(in.total) + "]");
      strides_[axis] = d == 1 && axis != 3 ? 0 : stride;
      if (axis == 3) mask_last_ = d;
      stride *= d;
    }
    mask_.resize(static_cast<size_t>(mask.numel()));
    const bool is_bool = mask.dtype() == DataType::kBool;
    for (int64_t i = 0; i < mask.numel(); ++i)
      mask_[static_cast<size_t>(i)] = is_bool ? (mask.data<uint8_t>()[i] ? 0.0f : kNegInf)
                                              : LoadAsFloat(mask.dtype(), mask.raw_data(), i);
    has_mask_ = true;
  }

  const AttentionAttrs& a_;
  std::vector<int64_t> offset_, valid_keys_;
  std::vector<float> mask_;
  int64_t strides_[4] = {0, 0, 0, 0};
  int64_t mask_last_ = 0;
  bool has_mask_ = false;
};

// One call's computation: rows (b, h, i) in parallel, each split into `chunks` key ranges
// when there are few rows and many keys; every piece keeps an online-softmax Partial and
// MergeRow combines a row's pieces by log-sum-exp and writes Y (and the qk output).
class AttentionPass {
 public:
  AttentionPass(KernelCall& call, const AttentionAttrs& a, const Operands& in, const KeyBias& bias)
      : a_(a), in_(in), bias_(bias), qf_(in.qv), kf_(in.kv), vf_(in.vv) {
    // Past caches may be strided (append capacity): each (batch, head) block is contiguous.
    // Any other layout is made dense here.
    const Tensor *pk = in.past_key, *pv = in.past_value;
    if (pk && !pk->DenseFrom(2)) pk = &(past_key_dense_ = pk->Contiguous());
    if (pv && !pv->DenseFrom(2)) pv = &(past_value_dense_ = pv->Contiguous());
    past_k_.emplace(pk, in.batch * in.hkv);
    past_v_.emplace(pv, in.batch * in.hkv);
    past_key_ = pk;
    past_value_ = pv;
    scale_ = a.has_scale ? a.scale : 1.0f / std::sqrt(static_cast<float>(in.dk));
    AllocateOutputs(call);
    num_rows_ = in.batch * in.hq * in.sq;
    if (qk_data_ == nullptr && num_rows_ < 2 * call.threads() && in.total >= kSplitMinKeys)
      chunks_ = std::min<int64_t>((2 * call.threads() + num_rows_ - 1) / num_rows_,
                                  in.total / (kSplitMinKeys / 2));
    chunks_ = std::max<int64_t>(1, chunks_);
    chunk_len_ = (in.total + chunks_ - 1) / chunks_;
    partials_.resize(static_cast<size_t>(num_rows_ * chunks_));
  }

  // The past caches as read (a dense copy where the given layout was not block-dense).
  const Tensor* past_key() const { return past_key_; }
  const Tensor* past_value() const { return past_value_; }
  int64_t pieces() const { return num_rows_ * chunks_; }
  int64_t rows() const { return num_rows_; }
  void ScorePiece(int64_t piece);
  void MergeRow(int64_t row);

 private:
  void AllocateOutputs(KernelCall& call) {
    const Tensor& q = *in_.q;
    Tensor& y = q.rank() == 4
                    ? call.AllocateOutput(0, q.dtype(), {in_.batch, in_.hq, in_.sq, in_.dv})
                    : call.AllocateOutput(0, q.dtype(), {in_.batch, in_.sq, in_.hq * in_.dv});
    y_data_ = y.mutable_raw_data();
    if (call.output_wanted(3))
      qk_data_ = call.AllocateOutput(3, q.dtype(), {in_.batch, in_.hq, in_.sq, in_.total})
                     .mutable_raw_data();
  }
  KeyRows Rows(const FloatRows& cur, const PastBlocks& past, int64_t d, int64_t b,
               int64_t h) const {
    KeyRows r;
    r.past = past.Block(b * in_.hkv + h);
    r.past_len = in_.past_len;
    r.past_stride = d;
    r.current = cur.Row(b, h, 0);
    r.current_stride = cur.seq_stride;
    return r;
  }
  float Cap(float s) const { return a_.softcap > 0 ? a_.softcap * std::tanh(s / a_.softcap) : s; }
  int64_t YIndex(int64_t b, int64_t h, int64_t i) const {
    return in_.q->rank() == 4 ? ((b * in_.hq + h) * in_.sq + i) * in_.dv
                              : (b * in_.sq + i) * in_.hq * in_.dv + h * in_.dv;
  }
  int64_t QkIndex(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * in_.hq + h) * in_.sq + i) * in_.total + j;
  }
  void WriteProbabilities(int64_t b, int64_t h, int64_t i, float max, float sum) const;

  const AttentionAttrs& a_;
  const Operands& in_;
  const KeyBias& bias_;
  const FloatRows qf_, kf_, vf_;  // float views of Q, K, V (in place for FLOAT)
  Tensor past_key_dense_, past_value_dense_;
  const Tensor *past_key_ = nullptr, *past_value_ = nullptr;
  std::optional<PastBlocks> past_k_, past_v_;
  float scale_ = 1.0f;
  void* y_data_ = nullptr;
  void* qk_data_ = nullptr;
  int64_t num_rows_ = 0, chunks_ = 1, chunk_len_ = 0;
  std::vector<Partial> partials_;  // [row, chunk]
};

void AttentionPass::ScorePiece(int64_t piece) {
  const int64_t row = piece / chunks_, chunk = piece % chunks_;
  const int64_t i = row % in_.sq, h = (row / in_.sq) % in_.hq, b = row / (in_.sq * in_.hq);
  const int64_t kh = h / in_.group, total = in_.total;
  const KeyRows keys = Rows(kf_, *past_k_, in_.dk, b, kh);
  const KeyRows values = Rows(vf_, *past_v_, in_.dv, b, kh);
  const float* qrow = qf_.Row(b, h, i);
  Partial& p = partials_[static_cast<size_t>(piece)];
  p.acc.assign(static_cast<size_t>(in_.dv), 0.0f);
  const int64_t j_begin = chunk * chunk_len_, j_end = std::min(total, j_begin + chunk_len_);
  float scores[kKeyBlock];
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, j_end - j0);
    float block_max = kNegInf;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j = j0 + t;
      const float bj = bias_(b, h, i, j);
      float raw = kNegInf;
      if (bj != kNegInf || qk_data_) raw = Cap(Dot(qrow, keys.Row(j), in_.dk) * scale_);
      const float s = raw + bj;
      if (qk_data_ && a_.qk_mode <= 1)
        StoreFromFloat(in_.q->dtype(), qk_data_, QkIndex(b, h, i, j), raw);
      else if (qk_data_ && a_.qk_mode == 2)
        StoreFromFloat(in_.q->dtype(), qk_data_, QkIndex(b, h, i, j), s);
      scores[t] = bj == kNegInf ? kNegInf : s;
      block_max = math::NanMax(block_max, scores[t]);
    }
    if (block_max == kNegInf) continue;
    if (math::MaxMoves(block_max, p.max)) {  // rescale what was accumulated under the old maximum
      const float r = p.max == kNegInf ? 0.0f : std::exp(p.max - block_max);
      p.sum *= r;
      for (float& acc : p.acc) acc *= r;
      p.max = block_max;
    }
    // The block's weights in one vector pass (masked keys: e^-inf = 0, skipped below).
    float weights[kKeyBlock];
    p.sum += static_cast<float>(math::VecExpShiftSum(scores, p.max, weights, n));
    for (int64_t t = 0; t < n; ++t)
      if (scores[t] != kNegInf) Axpy(weights[t], values.Row(j0 + t), p.acc.data(), in_.dv);
  }
}

// Merges the row's chunks (log-sum-exp) and writes Y; fully masked rows give zeros.
void AttentionPass::MergeRow(int64_t row) {
  const int64_t i = row % in_.sq, h = (row / in_.sq) % in_.hq, b = row / (in_.sq * in_.hq);
  const int64_t dv = in_.dv;
  float max = kNegInf;
  for (int64_t c = 0; c < chunks_; ++c)
    max = math::NanMax(max, partials_[static_cast<size_t>(row * chunks_ + c)].max);
  std::vector<float> out(static_cast<size_t>(dv), 0.0f);
  float sum = 0;
  if (max != kNegInf) {
    for (int64_t c = 0; c < chunks_; ++c) {
      const Partial& p = partials_[static_cast<size_t>(row * chunks_ + c)];
      if (p.max == kNegInf) continue;
      const float r = std::exp(p.max - max);
      sum += p.sum * r;
      for (int64_t d = 0; d < dv; ++d)
        out[static_cast<size_t>(d)] += p.acc[static_cast<size_t>(d)] * r;
    }
    for (float& o : out) o /= sum;
  }
  const int64_t at = YIndex(b, h, i);
  for (int64_t d = 0; d < dv; ++d)
    StoreFromFloat(in_.q->dtype(), y_data_, at + d, out[static_cast<size_t>(d)]);
  if (qk_data_ && a_.qk_mode == 3) WriteProbabilities(b, h, i, max, sum);
}

// qk_matmul_output_mode 3: the probabilities need the row's final max and sum.
void AttentionPass::WriteProbabilities(int64_t b, int64_t h, int64_t i, float max,
                                       float sum) const {
  const KeyRows keys = Rows(kf_, *past_k_, in_.dk, b, h / in_.group);
  for (int64_t j = 0; j < in_.total; ++j) {
    const float bj = bias_(b, h, i, j);
    float prob = 0.0f;
    if (max != kNegInf && bj != kNegInf)
      prob = std::exp(Cap(Dot(qf_.Row(b, h, i), keys.Row(j), in_.dk) * scale_) + bj - max) / sum;
    StoreFromFloat(in_.q->dtype(), qk_data_, QkIndex(b, h, i, j), prob);
  }
}

void Attention::Compute(KernelCall& call) const {
  const Operands in = ReadOperands(call, a_);
  const KeyBias bias(call, a_, in);
  AttentionPass pass(call, a_, in, bias);
  call.ParallelFor(pass.pieces(), 1, [&](int64_t p0, int64_t p1) {
    for (int64_t piece = p0; piece < p1; ++piece) pass.ScorePiece(piece);
  });
  call.ParallelFor(pass.rows(), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) pass.MergeRow(row);
  });
  if (call.output_wanted(1)) WritePresent(call, 1, 4, pass.past_key(), in.kv);
  if (call.output_wanted(2)) WritePresent(call, 2, 5, pass.past_value(), in.vv);
}

}  // namespace

OL_KERNEL_FACTORY(Attention)

}  // namespace onnx_light::ops
