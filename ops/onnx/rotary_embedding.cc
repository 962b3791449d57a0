// RotaryEmbedding (opset 23). X is [batch, num_heads, seq, head_size] or
// [batch, seq, hidden] (with the num_heads attribute). The first rotary_embedding_dim
// (default head_size) values of each head are rotated by (cos, sin) taken from the caches:
// rows position_ids[b, s] of [max_pos, dim/2] caches, or, without position_ids, caches of
// shape [batch, seq, dim/2]. interleaved=1 pairs (x[2i], x[2i+1]); otherwise x[i] pairs
// with x[i + dim/2]. Values past the rotary dimension are copied.
#include <vector>

#include "core/runtime_value.h"
#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::runtime::ShapeToString;
using math::DataType;
using math::Shape;
using math::Tensor;

class RotaryEmbedding final : public core::runtime::KernelBase {
 public:
  explicit RotaryEmbedding(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& cos_t = call.input(1);
    const Tensor& sin_t = call.input(2);
    const Tensor* pos_t = call.has_input(3) ? &call.input(3) : nullptr;
    if (!math::IsFloatType(x.dtype()))
      math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
    if (cos_t.dtype() != x.dtype() || sin_t.dtype() != x.dtype())
      call.Fail("cos_cache and sin_cache must have X's type " + core::DataTypeName(x.dtype()));
    int64_t batch, seq, heads, head_size;
    const bool rank4 = x.rank() == 4;
    if (rank4) {
      batch = x.shape()[0];
      heads = x.shape()[1];
      seq = x.shape()[2];
      head_size = x.shape()[3];
    } else if (x.rank() == 3) {
      if (num_heads_ <= 0) call.Fail("a 3-D input needs the num_heads attribute");
      batch = x.shape()[0];
      seq = x.shape()[1];
      heads = num_heads_;
      if (x.shape()[2] % heads != 0)
        call.Fail("hidden size " + std::to_string(x.shape()[2]) +
                  " is not a multiple of num_heads " + std::to_string(heads));
      head_size = x.shape()[2] / heads;
    } else {
      call.Fail("input 'X' must be 3-D or 4-D, got shape " + ShapeToString(x.shape()));
    }
    const int64_t rot = rotary_dim_ == 0 ? head_size : rotary_dim_;
    if (rot > head_size || rot % 2 != 0 || rot < 0)
      call.Fail("rotary_embedding_dim " + std::to_string(rot) +
                " must be even and at most the head size " + std::to_string(head_size));
    const int64_t half = rot / 2;
    std::vector<int64_t> pos;
    int64_t max_pos = 0;
    if (pos_t != nullptr) {
      if (pos_t->shape() != Shape{batch, seq})
        call.Fail("position_ids must have shape [" + std::to_string(batch) + ", " +
                  std::to_string(seq) + "], got " + ShapeToString(pos_t->shape()));
      pos = math::IntValues(call.node(), *pos_t, "input 'position_ids'");
      if (cos_t.rank() != 2 || cos_t.shape()[1] != half || sin_t.shape() != cos_t.shape())
        call.Fail("with position_ids, cos_cache and sin_cache must have shape [max_position, " +
                  std::to_string(half) + "], got " + ShapeToString(cos_t.shape()) + " and " +
                  ShapeToString(sin_t.shape()));
      max_pos = cos_t.shape()[0];
      for (int64_t p : pos)
        if (p < 0 || p >= max_pos)
          call.Fail("position id " + std::to_string(p) + " is outside the caches' [0, " +
                    std::to_string(max_pos) + ")");
    } else if (cos_t.shape() != Shape{batch, seq, half} || sin_t.shape() != cos_t.shape()) {
      call.Fail("without position_ids, cos_cache and sin_cache must have shape [" +
                std::to_string(batch) + ", " + std::to_string(seq) + ", " + std::to_string(half) +
                "], got " + ShapeToString(cos_t.shape()) + " and " + ShapeToString(sin_t.shape()));
    }
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    const math::FloatView xv(x), cv(cos_t), sv(sin_t);
    math::FloatSink yv(y);
    const float* xp = xv.data();
    float* yp = yv.data();
    const bool interleaved = interleaved_;
    math::ParallelFor(batch * seq * heads, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t h = t % heads, s = (t / heads) % seq, b = t / (heads * seq);
        const int64_t off = rank4 ? ((b * heads + h) * seq + s) * head_size
                                  : ((b * seq + s) * heads + h) * head_size;
        const int64_t row = pos_t ? pos[static_cast<size_t>(b * seq + s)] : b * seq + s;
        const float* c = cv.data() + row * half;
        const float* sn = sv.data() + row * half;
        const float* in = xp + off;
        float* out = yp + off;
        if (interleaved) {
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = in[2 * i], x2 = in[2 * i + 1];
            out[2 * i] = c[i] * x1 - sn[i] * x2;
            out[2 * i + 1] = sn[i] * x1 + c[i] * x2;
          }
        } else {
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = in[i], x2 = in[i + half];
            out[i] = c[i] * x1 - sn[i] * x2;
            out[i + half] = sn[i] * x1 + c[i] * x2;
          }
        }
        for (int64_t i = rot; i < head_size; ++i) out[i] = in[i];
      }
    });
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    interleaved_ = core::runtime::AttrInt(node, "interleaved", 0) != 0;
    num_heads_ = core::runtime::AttrInt(node, "num_heads", 0);
    rotary_dim_ = core::runtime::AttrInt(node, "rotary_embedding_dim", 0);
  }

 private:
  bool interleaved_ = false;
  int64_t num_heads_ = 0;
  int64_t rotary_dim_ = 0;
};

OL_KERNEL_FACTORY(RotaryEmbedding)

}  // namespace onnx_light::ops
