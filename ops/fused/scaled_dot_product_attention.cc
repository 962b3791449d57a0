// ai.onnx_light.fused::ScaledDotProductAttention — what the plan substitutes for the
// decomposed attention that torch exports (executor/fusion.cc): repeat the KV heads
// (Unsqueeze/Expand/Reshape), transpose K, scale Q and K, MatMul, add the mask, Softmax,
// zero fully masked rows (IsNaN/Where), MatMul with V.
//
// Inputs: Q [B, H, S, D]; K [B, Hkv, T, D] and V [B, Hkv, T, Dv] (FLOAT, FLOAT16 or BFLOAT16,
// all one type; may be strided append-capacity caches, read in place); optional additive
// mask (FLOAT, FLOAT16 or BFLOAT16) broadcastable to [B, H, S, T]; then the int64 shape operands of
// the replaced Expand/Reshape nodes, checked against the GQA layout so that the substitution is
// exact (inputs 4-9: K's Expand shape, K's Reshape shape, the [-1, T, D] Reshape, the [B, H, D, T]
// Reshape, V's Expand shape, V's Reshape shape; each may be empty when that node was absent).
// 16-bit types are computed in FLOAT: decode reads the 16-bit K/V rows in place (the
// code-domain kernels widen them in registers), prompts widen K and V once, and Y is rounded
// once at the end.
// Attributes: q_scale, k_scale (the scalar Muls of q and k; a scalar Mul of the scores is
// folded into q_scale); softcap (> 0: the scores are softcap * tanh(s / softcap) before the
// mask, Gemma 2's soft cap; 0 or absent: none). Output: Y [B, H, S, Dv].
//
// Each task takes one (batch, KV head, query) and the H/Hkv query heads that share the KV
// head, so every K/V row is read once for the whole group, over a key range with an online
// softmax (no score matrix); with few tasks and many keys (decode), keys are split across
// tasks and the partial states merged by log-sum-exp. A row whose keys are all masked gives
// zeros, as the replaced IsNaN/Where does. Prompts (many queries) take the tiled path of
// ops/fused/tiled_attention.h instead: the same result per row, as small GEMMs.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/attributes.h"
#include "ops/fused/tiled_attention.h"
#include "ops/kernel_factory.h"
#include "ops/math/code_dot.h"
#include "ops/math/common.h"
#include "ops/math/vector_ops.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::ShapeToString;
using core::runtime::Tensor;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kMaxGroup = 16;  // query heads per KV head handled in one task
constexpr int64_t kKeyBlock = 64;  // keys scored per online-softmax step
// Below this a task's key range is never split. Decode reads K/V from memory (the weights
// streamed since evict them), so more, shorter tasks keep more rows in flight.
constexpr int64_t kSplitMinKeys = 64;
// Below this many multiply-adds (a decode step over a short cache: 3 KV heads x 3 query
// heads x 128 keys x 128 is 147K) the whole call runs on the calling thread: it takes tens
// of microseconds, about what waking the arena's sleeping worker costs on a VM.
constexpr int64_t kParallelMinMacs = int64_t{1} << 19;

// Resolves a Reshape target against the input shape (0 copies, -1 infers).
Shape ResolveReshape(const Shape& in, const std::vector<int64_t>& target) {
  Shape out(target.begin(), target.end());
  int64_t known = 1, infer = -1, total = 1;
  for (int64_t d : in) total *= d;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && i < in.size()) out[i] = in[i];
    if (out[i] == -1) {
      infer = static_cast<int64_t>(i);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0 && known != 0) out[static_cast<size_t>(infer)] = total / known;
  return out;
}

// Rows of one (batch, KV head) of a [B, Hkv, T, D] tensor whose last dim is dense; `stride`
// in elements of `bytes` bytes. FLOAT rows also as floats (the non-dense path reads those).
struct Rows {
  const uint8_t* base = nullptr;
  int64_t stride = 0;
  int64_t bytes = 4;
  const void* Row(int64_t j) const { return base + j * stride * bytes; }
  const float* FloatRow(int64_t j) const { return static_cast<const float*>(Row(j)); }
};

Rows RowsOf(const Tensor& t, int64_t b, int64_t h) {
  const Shape st = t.strides();
  const int64_t bytes = core::ElementBits(t.dtype()) / 8;
  return {static_cast<const uint8_t*>(t.strided_data()) + (b * st[0] + h * st[1]) * bytes, st[2],
          bytes};
}

math::RowCode CodeOf(DataType dt) {
  if (dt == DataType::kFloat16) return math::RowCode::kHalf;
  if (dt == DataType::kBFloat16) return math::RowCode::kBFloat16;
  return math::RowCode::kFloat;
}

struct Partial {
  float max = kNegInf;
  float sum = 0;
};

// The per-row path (decode, short prompts, rows the tiled path declines): tasks of one
// (batch, KV head, query) with the query heads that share the KV head, over a key range with
// an online softmax; with few tasks and many keys the keys are split across tasks and the
// partial states merged by log-sum-exp, by whichever task of a row finishes last.
struct RowAttention {
  RowAttention(const Tensor& q_, const Tensor& k_, const Tensor& v_, const float* qp_,
               const float* mask_, const int64_t* ms_, float scale_, float softcap_, float* yp_)
      : q(q_),
        k(k_),
        v(v_),
        qp(qp_),
        mask(mask_),
        ms(ms_),
        scale(scale_),
        softcap(softcap_),
        yp(yp_) {}

  const Tensor& q;
  const Tensor& k;
  const Tensor& v;
  const float* qp;
  const float* mask;
  const int64_t* ms;  // mask strides over [B, H, S, T], 0 where broadcast
  float scale;
  float softcap;  // > 0: capped scores (see the top of the file)
  float* yp;

  int64_t heads = q.dim(1), sq = q.dim(2), dk = q.dim(3);
  int64_t kv_heads = k.dim(1), total = k.dim(2), dv = v.dim(3);
  int64_t group = heads / kv_heads, rows = q.dim(0) * kv_heads * sq;
  int64_t chunks = 1, chunk_len = 0;
  std::vector<Partial> partials;                    // [row, chunk, head of the group]
  std::vector<float> acc;                           // [row, chunk, head of the group, dv]
  std::unique_ptr<std::atomic<int64_t>[]> pending;  // chunks of each row still running

  void Run(const KernelCall& call) {
    const int64_t threads = call.threads();
    const bool serial = rows * group * total * (dk + dv) < kParallelMinMacs;
    if (!serial && rows < 2 * threads && total >= kSplitMinKeys)
      chunks = std::min<int64_t>((2 * threads + rows - 1) / rows, total / (kSplitMinKeys / 2));
    chunk_len = (total + chunks - 1) / chunks;
    partials.resize(static_cast<size_t>(rows * chunks * group));
    acc.assign(static_cast<size_t>(rows * chunks * group * dv), 0.0f);
    pending.reset(new std::atomic<int64_t>[static_cast<size_t>(rows)]);
    for (int64_t r = 0; r < rows; ++r) pending[static_cast<size_t>(r)] = chunks;
    call.ParallelFor(rows * chunks, serial ? rows : 1, [&](int64_t t0, int64_t t1) {
      for (int64_t task = t0; task < t1; ++task) {
        RunTask(task);
        if (pending[static_cast<size_t>(task / chunks)].fetch_sub(1) == 1) MergeRow(task / chunks);
      }
    });
  }

  // The mask entries of keys [j0, j0 + n) for head h: a pointer into the mask when they are
  // contiguous, else gathered into `buffer`; null without a mask.
  const float* Bias(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* buffer) const {
    if (mask == nullptr) return nullptr;
    const float* row = mask + b * ms[0] + h * ms[1] + i * ms[2];
    if (ms[3] == 1) return row + j0;
    for (int64_t t = 0; t < n; ++t) buffer[t] = row[(j0 + t) * ms[3]];
    return buffer;
  }

  void RunTask(int64_t task) {
    const int64_t row = task / chunks, chunk = task % chunks;
    const int64_t i = row % sq, kh = (row / sq) % kv_heads, b = row / (sq * kv_heads);
    const Rows keys = RowsOf(k, b, kh), values = RowsOf(v, b, kh);
    Partial* part = &partials[static_cast<size_t>(task * group)];
    float* out = &acc[static_cast<size_t>(task * group * dv)];
    const int64_t h0 = kh * group;
    const float* q0 = qp + ((b * heads + h0) * sq + i) * dk;  // head h0 + g at q0 + g * sq * dk
    const int64_t j_begin = chunk * chunk_len, j_end = std::min(total, j_begin + chunk_len);
    float scores[kMaxGroup][kKeyBlock];
    float buffer[kKeyBlock];
    bool live[kMaxGroup];
    // Rows back to back (a cache's head, capacity or not, is): the code-domain kernels read
    // them and prefetch the next block's lines as they go (math::CodeRows::ahead), where a
    // burst of the whole next block stalled the arithmetic and left the reads at half the
    // memory rate at long caches.
    const bool dense = keys.stride == dk && values.stride == dv;
    Prefetch(keys, values, j_begin, std::min(kKeyBlock, j_end - j_begin));
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyBlock) {
      const int64_t n = std::min(kKeyBlock, j_end - j0);
      const int64_t next = std::min(kKeyBlock, j_end - j0 - n);
      // A mask shared by the heads that kills the whole block: nothing to score.
      if (mask != nullptr && ms[1] == 0 && AllDead(Bias(b, h0, i, j0, n, buffer), n)) {
        Prefetch(keys, values, j0 + n, next);
        continue;
      }
      math::CodeRows krows{CodeOf(k.dtype()), keys.Row(j0), 0, n};
      math::CodeRows vrows{CodeOf(v.dtype()), values.Row(j0), 0, n};
      if (dense && next == n) {
        krows.ahead = keys.Row(j0 + n);
        vrows.ahead = values.Row(j0 + n);
      }
      if (krows.ahead == nullptr || !math::PrefetchesAhead(krows, dk) ||
          !math::PrefetchesAhead(vrows, dv))
        Prefetch(keys, values, j0 + n, next);
      if (dense)
        math::GroupCodeDots(q0, sq * dk, group, &krows, 1, dk, scores[0], kKeyBlock);
      else
        math::GroupDots(q0, sq * dk, group, keys.FloatRow(j0), keys.stride, n, dk, scores[0],
                        kKeyBlock);
      bool all_live = true;
      for (int64_t g = 0; g < group; ++g) {
        live[g] = Softmax(part[g], scores[g], n, Bias(b, h0 + g, i, j0, n, buffer), out + g * dv);
        all_live = all_live && live[g];
      }
      // Values: the block's rows (in L1 after the first pass) weighted and summed with the
      // outputs' chunks in registers.
      if (all_live) {
        if (dense)
          math::GroupCodeWeightedRowSums(scores[0], kKeyBlock, group, &vrows, 1, dv, nullptr, out,
                                         dv);
        else
          math::GroupWeightedRowSums(scores[0], kKeyBlock, group, values.FloatRow(j0),
                                     values.stride, n, out, dv, dv);
        continue;
      }
      for (int64_t g = 0; g < group; ++g) {
        if (!live[g]) continue;
        if (dense)  // also asks for the next block's value rows, as the all-live call does
          math::GroupCodeWeightedRowSums(scores[g], kKeyBlock, 1, &vrows, 1, dv, nullptr,
                                         out + g * dv, dv);
        else
          math::WeightedRowSum(scores[g], n, values.FloatRow(j0), values.stride, out + g * dv, dv);
      }
    }
  }

  // Asks for the next block's K and V rows while this one is computed: the decode step
  // reads them from memory, and the scoring alone does not keep enough loads in flight.
  void Prefetch(const Rows& keys, const Rows& values, int64_t j0, int64_t n) const {
    for (int64_t t = 0; t < n; ++t) {
      const char* kr = reinterpret_cast<const char*>(keys.Row(j0 + t));
      const char* vr = reinterpret_cast<const char*>(values.Row(j0 + t));
      for (int64_t byte = 0; byte < dk * keys.bytes; byte += 64) __builtin_prefetch(kr + byte);
      for (int64_t byte = 0; byte < dv * values.bytes; byte += 64) __builtin_prefetch(vr + byte);
    }
  }

  static bool AllDead(const float* bias, int64_t n) {
    for (int64_t t = 0; t < n; ++t)
      if (bias[t] != kNegInf) return false;
    return true;
  }

  // One online-softmax step of one head over a block of raw scores: scaled and masked, the
  // running max, sum and output rescaled, the scores turned into weights. False when the
  // block has no live key for this head (its weights are then unused).
  bool Softmax(Partial& p, float* sc, int64_t n, const float* bias, float* out) const {
    float block_max;
    if (softcap > 0.0f) {
      math::ScaleAddMax(sc, n, scale / softcap, nullptr);
      math::VecTanh(sc, sc, n);
      block_max = math::ScaleAddMax(sc, n, softcap, bias);
    } else {
      block_max = math::ScaleAddMax(sc, n, scale, bias);
    }
    if (block_max == kNegInf) return false;
    if (math::MaxMoves(block_max, p.max)) {
      const float r = p.max == kNegInf ? 0.0f : std::exp(p.max - block_max);
      p.sum *= r;
      for (int64_t d = 0; d < dv; ++d) out[d] *= r;
      p.max = block_max;
    }
    // exp(s - max) for the block in one vector pass (-inf gives exactly 0).
    p.sum += static_cast<float>(math::VecExpShiftSum(sc, p.max, sc, n));
    return true;
  }

  // Merges the chunks of each head of `row` and writes Y; fully masked rows give zeros.
  void MergeRow(int64_t row) {
    const int64_t i = row % sq, kh = (row / sq) % kv_heads, b = row / (sq * kv_heads);
    for (int64_t g = 0; g < group; ++g) {
      float max = kNegInf;
      for (int64_t c = 0; c < chunks; ++c)
        max = math::NanMax(max, partials[static_cast<size_t>((row * chunks + c) * group + g)].max);
      float* dst = yp + ((b * heads + kh * group + g) * sq + i) * dv;
      std::fill(dst, dst + dv, 0.0f);
      if (max == kNegInf) continue;
      float sum = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        const size_t at = static_cast<size_t>((row * chunks + c) * group + g);
        if (partials[at].max == kNegInf) continue;
        const float r = std::exp(partials[at].max - max);
        sum += partials[at].sum * r;
        math::Axpy(r, &acc[at * static_cast<size_t>(dv)], dst, dv);
      }
      const float inv = 1.0f / sum;
      for (int64_t d = 0; d < dv; ++d) dst[d] *= inv;
    }
  }
};

class ScaledDotProductAttention final : public core::runtime::KernelBase {
 public:
  explicit ScaledDotProductAttention(const core::runtime::KernelContext&) {}

  bool ReadsStridedInput(size_t index) const override { return index == 1 || index == 2; }

  void Compute(KernelCall& call) const override {
    const Tensor& q = call.input(0);
    const Tensor& k = call.input(1);
    const Tensor& v = call.input(2);
    const Tensor* mask = call.has_input(3) ? &call.input(3) : nullptr;
    const DataType dt = q.dtype();
    if (dt != DataType::kFloat && dt != DataType::kFloat16 && dt != DataType::kBFloat16)
      call.Fail("Q must be FLOAT, FLOAT16 or BFLOAT16, got " + core::DataTypeName(dt));
    for (const Tensor* t : {&q, &k, &v})
      if (t->dtype() != dt || t->rank() != 4)
        call.Fail("Q, K and V must be 4D " + core::DataTypeName(dt) + ", got " +
                  core::DataTypeName(t->dtype()) + " " + ShapeToString(t->shape()));
    const int64_t batch = q.dim(0), heads = q.dim(1), sq = q.dim(2), dk = q.dim(3);
    const int64_t kv_heads = k.dim(1), total = k.dim(2), dv = v.dim(3);
    if (k.dim(0) != batch || v.dim(0) != batch || k.dim(3) != dk || v.dim(1) != kv_heads ||
        v.dim(2) != total || kv_heads <= 0 || heads % kv_heads != 0 ||
        heads / kv_heads > kMaxGroup || k.strides()[3] != 1 || v.strides()[3] != 1)
      call.Fail("Q " + ShapeToString(q.shape()) + ", K " + ShapeToString(k.shape()) + ", V " +
                ShapeToString(v.shape()) + " are not a grouped-query attention");
    CheckLayout(call, batch, heads, kv_heads, total, dk, dv);

    // Mask strides over [B, H, S, T] (0 where broadcast).
    int64_t ms[4] = {0, 0, 0, 0};
    const float* mask_data = nullptr;
    Tensor mask_dense;
    if (mask != nullptr) {
      const DataType mt = mask->dtype();
      if ((mt != DataType::kFloat && mt != DataType::kFloat16 && mt != DataType::kBFloat16) ||
          mask->rank() > 4)
        call.Fail("the mask must be FLOAT, FLOAT16 or BFLOAT16 of rank <= 4, got " +
                  mask->DebugString());
      mask_dense = Widened(*mask);
      const int64_t want[4] = {batch, heads, sq, total};
      int64_t stride = 1;
      for (int64_t i = mask->rank() - 1; i >= 0; --i) {
        const int64_t axis = 4 - mask->rank() + i, d = mask->dim(i);
        if (d != 1 && d != want[axis])
          call.Fail("mask " + ShapeToString(mask->shape()) + " does not broadcast to scores [" +
                    std::to_string(batch) + ", " + std::to_string(heads) + ", " +
                    std::to_string(sq) + ", " + std::to_string(total) + "]");
        ms[axis] = d == 1 ? 0 : stride;
        stride *= d;
      }
      mask_data = mask_dense.data<float>();
    }

    Tensor& y = call.AllocateOutput(0, dt, {batch, heads, sq, dv});
    math::FloatSink ys(y);
    const Tensor qd = Widened(q);
    const float* qp = qd.data<float>();
    const float scale = q_scale_ * k_scale_;
    if (fused::PrefersTiles(sq)) {
      // The tiled path reads FLOAT K/V: 16-bit ones are widened once here.
      const Tensor kw = dt == DataType::kFloat ? k : Widened(k);
      const Tensor vw = dt == DataType::kFloat ? v : Widened(v);
      if (ComputeTiled(q, kw, vw, qp, mask_data, ms, scale, ys.data())) return ys.Finish();
    }
    // The row path reads 16-bit rows in place when each head's rows lie back to back.
    const bool in_place = dt == DataType::kFloat || (k.strides()[2] == dk && v.strides()[2] == dv);
    const Tensor kr = in_place ? k : Widened(k), vr = in_place ? v : Widened(v);
    RowAttention(q, kr, vr, qp, mask_data, ms, scale, softcap_, ys.data()).Run(call);
    ys.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    q_scale_ = core::runtime::AttrFloat(node, "q_scale", 1.0f);
    k_scale_ = core::runtime::AttrFloat(node, "k_scale", 1.0f);
    softcap_ = core::runtime::AttrFloat(node, "softcap", 0.0f);
    OL_CHECK(softcap_ >= 0.0f, core::ErrorCode::kInvalidArgument,
             "ScaledDotProductAttention node '" + node.name() + "': softcap must be >= 0, got " +
                 std::to_string(softcap_));
  }

 private:
  // `t` as a dense FLOAT tensor (itself when it already is one).
  static Tensor Widened(const Tensor& t) {
    if (t.dtype() == DataType::kFloat) return t.Contiguous();
    const Tensor dense = t.Contiguous();
    Tensor out("", DataType::kFloat, t.shape());
    math::ToFloatParallel(t.dtype(), dense.raw_data(), out.mutable_data<float>(), t.numel());
    return out;
  }

  // Prompts: the tiled path (ops/fused/tiled_attention.h); false when it declines.
  bool ComputeTiled(const Tensor& q, const Tensor& k, const Tensor& v, const float* qp,
                    const float* mask, const int64_t ms[4], float scale, float* yp) const {
    fused::AttentionProblem p;
    p.batch = q.dim(0);
    p.heads = q.dim(1);
    p.queries = q.dim(2);
    p.dk = q.dim(3);
    p.kv_heads = k.dim(1);
    p.keys = k.dim(2);
    p.dv = v.dim(3);
    p.q = qp;
    p.k = static_cast<const float*>(k.strided_data());
    p.v = static_cast<const float*>(v.strided_data());
    const Shape ks = k.strides(), vs = v.strides();
    for (int i = 0; i < 3; ++i) {
      p.k_strides[i] = ks[static_cast<size_t>(i)];
      p.v_strides[i] = vs[static_cast<size_t>(i)];
    }
    p.mask = mask;
    std::copy(ms, ms + 4, p.mask_strides);
    p.scale = scale;
    p.softcap = softcap_;
    p.y = yp;
    return fused::TiledAttention(p);
  }

  // The replaced Expand/Reshape nodes must have produced exactly the GQA layout: heads
  // repeated kv-head-major, K transposed per head.
  void CheckLayout(KernelCall& call, int64_t batch, int64_t heads, int64_t kv_heads, int64_t total,
                   int64_t dk, int64_t dv) const {
    const int64_t rep = heads / kv_heads;
    auto operand = [&](size_t i) -> std::vector<int64_t> {
      if (!call.has_input(i)) return {};
      return call.input(i).ToInt64Vector();
    };
    auto expect = [&](size_t i, const Shape& in, const Shape& want, bool expand) {
      const std::vector<int64_t> target = operand(i);
      if (target.empty() && !call.has_input(i)) return;
      Shape got;
      if (expand) {  // numpy broadcast of `in` against `target`
        const size_t r = std::max(in.size(), target.size());
        got.assign(r, 1);
        for (size_t a = 0; a < r; ++a) {
          const int64_t x = a + in.size() >= r ? in[a + in.size() - r] : 1;
          const int64_t t = a + target.size() >= r ? target[a + target.size() - r] : 1;
          got[a] = x == 1 ? t : x;
        }
      } else {
        got = ResolveReshape(in, target);
      }
      if (got != want)
        call.Fail("the fused attention's layout operand " + std::to_string(i) + " gives " +
                  ShapeToString(got) + " where grouped-query attention needs " +
                  ShapeToString(want));
    };
    const bool repeated = call.has_input(4);
    expect(4, {batch, kv_heads, 1, total, dk}, {batch, kv_heads, rep, total, dk}, true);
    expect(5, {batch, kv_heads, rep, total, dk}, {batch, heads, total, dk}, false);
    if (!repeated && rep != 1) call.Fail("K has fewer heads than Q but is not repeated");
    expect(6, {batch, heads, total, dk}, {batch * heads, total, dk}, false);
    expect(7, {batch * heads, dk, total}, {batch, heads, dk, total}, false);
    expect(8, {batch, kv_heads, 1, total, dv}, {batch, kv_heads, rep, total, dv}, true);
    expect(9, {batch, kv_heads, rep, total, dv}, {batch, heads, total, dv}, false);
    if (!call.has_input(8) && rep != 1) call.Fail("V has fewer heads than Q but is not repeated");
  }

  float q_scale_ = 1.0f, k_scale_ = 1.0f, softcap_ = 0.0f;
};

}  // namespace

OL_KERNEL_FACTORY(ScaledDotProductAttention)

}  // namespace onnx_light::ops
