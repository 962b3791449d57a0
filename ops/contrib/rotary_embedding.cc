// com.microsoft RotaryEmbedding (ContribRotaryEmbedding: the ONNX opset-23 op, whose inputs
// differ, is ops/onnx/rotary_embedding.cc). Semantics: onnxruntime's docs/ContribOperators.md and
// its CPU kernel (contrib_ops/cpu/bert/rotary_embedding.cc, rotary_embedding_helper.h). Inputs:
// input [B, S, hidden] or [B, N, S, head_size]; position_ids [B, S] (format 1) or one element p0
// (format 0: position p0 + s); cos_cache/sin_cache [max_position, rotary_dim / 2]. Attributes:
// interleaved, num_heads (3-D: head_size = hidden / num_heads; without it head_size = 2 * cos_cache
// dim 1), rotary_embedding_dim (0: the whole head; a partial rotation needs num_heads). Refused:
// is_packed_batching = 1, scale != 1 (the CPU kernel of onnxruntime does not apply it either).
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/rotary.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Tensor;

class ContribRotaryEmbedding final : public core::runtime::KernelBase {
 public:
  explicit ContribRotaryEmbedding(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override;

 protected:
  void Configure(const NodeProto& node) override {
    using namespace core::runtime;
    interleaved_ = AttrInt(node, "interleaved", 0) != 0;
    num_heads_ = AttrInt(node, "num_heads", 0);
    rotary_dim_attr_ = AttrInt(node, "rotary_embedding_dim", 0);
    if (AttrInt(node, "is_packed_batching", 0) != 0)
      Throw(core::ErrorCode::kNotImplemented,
            NodeLabel(node) + ": is_packed_batching = 1 is not supported");
    const float scale = AttrFloat(node, "scale", 1.0f);
    if (scale != 1.0f)
      Throw(core::ErrorCode::kNotImplemented,
            NodeLabel(node) + ": scale " + std::to_string(scale) + " is not supported (only 1)");
    if (num_heads_ < 0 || rotary_dim_attr_ < 0)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": num_heads and rotary_embedding_dim must be >= 0");
    if (rotary_dim_attr_ > 0 && num_heads_ == 0)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": num_heads must be given with rotary_embedding_dim");
  }

 private:
  // The geometry of the call: head size, rotary dim, heads and strides (elements).
  struct Layout {
    int64_t batch, seq, heads, head_size, rotary_dim;
    int64_t batch_stride, head_stride, seq_stride;
  };
  Layout Geometry(const KernelCall& call, const Tensor& x, const Tensor& cos) const;

  bool interleaved_ = false;
  int64_t num_heads_ = 0, rotary_dim_attr_ = 0;
};

ContribRotaryEmbedding::Layout ContribRotaryEmbedding::Geometry(const KernelCall& call,
                                                                const Tensor& x,
                                                                const Tensor& cos) const {
  Layout l{};
  l.batch = x.dim(0);
  const int64_t half = cos.dim(1);
  if (x.rank() == 4) {
    l.heads = x.dim(1);
    l.seq = x.dim(2);
    l.head_size = x.dim(3);
  } else {
    l.seq = x.dim(1);
    const int64_t hidden = x.dim(2);
    l.head_size = num_heads_ > 0 ? hidden / num_heads_ : 2 * half;
    if (l.head_size <= 0 || hidden % l.head_size != 0)
      call.Fail("hidden size " + std::to_string(hidden) + " of input 'input' is not a multiple " +
                "of the head size " + std::to_string(l.head_size));
    l.heads = hidden / l.head_size;
  }
  l.rotary_dim = rotary_dim_attr_ > 0 ? rotary_dim_attr_ : l.head_size;
  if (l.rotary_dim > l.head_size || l.rotary_dim % 2 != 0)
    call.Fail("rotary dimension " + std::to_string(l.rotary_dim) +
              " must be even and at most the head size " + std::to_string(l.head_size));
  if (half != l.rotary_dim / 2)
    call.Fail("input 'cos_cache' dimension 1 is " + std::to_string(half) + ", expected " +
              std::to_string(l.rotary_dim / 2) + " (rotary dimension / 2)");
  if (x.rank() == 4) {
    l.seq_stride = l.head_size;
    l.head_stride = l.seq * l.head_size;
    l.batch_stride = l.heads * l.head_stride;
  } else {
    l.head_stride = l.head_size;
    l.seq_stride = l.heads * l.head_size;
    l.batch_stride = l.seq * l.seq_stride;
  }
  return l;
}

void ContribRotaryEmbedding::Compute(KernelCall& call) const {
  const Tensor& x = call.input(0);
  const Tensor& pos = call.input(1);
  const Tensor& cos = call.input(2);
  const Tensor& sin = call.input(3);
  if (!math::IsFloatType(x.dtype()))
    math::ThrowUnsupportedType(call.node(), "input 'input'", x.dtype());
  if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype())
    call.Fail("inputs 'cos_cache' and 'sin_cache' must have input's element type");
  if (x.rank() != 3 && x.rank() != 4)
    call.Fail("input 'input' must be 3-D or 4-D, got " + core::runtime::ShapeToString(x.shape()));
  if (cos.rank() != 2 || cos.shape() != sin.shape())
    call.Fail("inputs 'cos_cache' and 'sin_cache' must be 2-D of the same shape, got " +
              core::runtime::ShapeToString(cos.shape()) + " and " +
              core::runtime::ShapeToString(sin.shape()));
  const Layout l = Geometry(call, x, cos);
  const std::vector<int64_t> ids = math::IntValues(call.node(), pos, "position_ids");
  const bool offset_form = ids.size() == 1 && pos.rank() <= 1;
  if (!offset_form && (pos.rank() != 2 || pos.dim(0) != l.batch || pos.dim(1) != l.seq))
    call.Fail("input 'position_ids' must be [batch, sequence] = [" + std::to_string(l.batch) +
              ", " + std::to_string(l.seq) + "] or one element, got " +
              core::runtime::ShapeToString(pos.shape()));
  const int64_t max_pos = cos.dim(0), half = cos.dim(1);
  auto position = [&](int64_t b, int64_t s) {
    const int64_t p = offset_form ? ids[0] + s : ids[static_cast<size_t>(b * l.seq + s)];
    if (p < 0 || p >= max_pos)
      call.Fail("position " + std::to_string(p) + " from input 'position_ids' is outside " +
                "input 'cos_cache' (" + std::to_string(max_pos) + " positions)");
    return p;
  };
  std::vector<int64_t> positions(static_cast<size_t>(l.batch * l.seq));
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      positions[static_cast<size_t>(b * l.seq + s)] = position(b, s);

  Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
  if (x.numel() == 0) return;
  const math::FloatView xv(x), cv(cos), sv(sin);
  math::FloatSink yv(y);
  const int64_t rows = l.batch * l.seq * l.heads;
  math::ParallelFor(rows, std::max<int64_t>(1, 8192 / l.head_size), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % l.heads, s = (r / l.heads) % l.seq, b = r / (l.heads * l.seq);
      const int64_t at = b * l.batch_stride + h * l.head_stride + s * l.seq_stride;
      const int64_t p = positions[static_cast<size_t>(b * l.seq + s)];
      contrib::RotateRow(xv.data() + at, yv.data() + at, l.head_size, l.rotary_dim,
                         cv.data() + p * half, sv.data() + p * half, interleaved_);
    }
  });
  yv.Finish();
}

OL_KERNEL_FACTORY(ContribRotaryEmbedding)

}  // namespace onnx_light::ops
