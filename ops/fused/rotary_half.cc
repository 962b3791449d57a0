// ai.onnx_light.fused::RotaryHalf — what the plan substitutes for the rotary embedding
// exporters write (executor/fusion.cc): Y = X * cos + concat(-X[..., h:], X[..., :h]) * sin,
// i.e. Mul, two Slices of the last axis, Neg, Concat, Mul, Add. cos and sin broadcast over
// the rows of X (e.g. [B, 1, S, D] against [B, H, S, D]); attributes `half` = h and `axis`,
// the sliced axis (-1, or X's last axis counted from 0).
// Inputs: X, cos, sin (FLOAT, FLOAT16, BFLOAT16, all of one type).
#include "executor/attributes.h"
#include "ops/fused/row_broadcast.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Tensor;

class RotaryHalf final : public core::runtime::KernelBase {
 public:
  explicit RotaryHalf(const core::runtime::KernelContext&) {}

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& cos = call.input(1);
    const Tensor& sin = call.input(2);
    if (!math::IsFloatType(x.dtype()) || x.rank() == 0)
      math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
    if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype())
      call.Fail("cos and sin must have X's element type");
    if (axis_ != -1 && axis_ != x.rank() - 1)
      call.Fail("the rotated axis " + std::to_string(axis_) + " is not the last axis of X " +
                core::runtime::ShapeToString(x.shape()));
    const int64_t d = x.dim(-1), rows = d == 0 ? 0 : x.numel() / d;
    if (d != 2 * half_)
      call.Fail("the rotated halves (" + std::to_string(half_) + " + " + std::to_string(half_) +
                ") do not make X's last dimension " + std::to_string(d));
    const std::vector<int64_t> cos_rows = fused::RowOffsets(call, x.shape(), cos.shape(), "cos");
    const std::vector<int64_t> sin_rows = fused::RowOffsets(call, x.shape(), sin.shape(), "sin");
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    if (rows == 0) return;
    const math::FloatView xv(x), cv(cos), sv(sin);
    math::FloatSink yv(y);
    const float *xp = xv.data(), *cp = cv.data(), *sp = sv.data();
    float* yp = yv.data();
    math::ParallelFor(rows, std::max<int64_t>(1, 16384 / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = xp + r * d;
        const float* c = cp + cos_rows[static_cast<size_t>(r)];
        const float* s = sp + sin_rows[static_cast<size_t>(r)];
        float* out = yp + r * d;
        for (int64_t j = 0; j < half_; ++j) out[j] = row[j] * c[j] + (-row[j + half_]) * s[j];
        for (int64_t j = half_; j < d; ++j) out[j] = row[j] * c[j] + row[j - half_] * s[j];
      }
    });
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    half_ = core::runtime::AttrInt(node, "half", 0);
    axis_ = core::runtime::AttrInt(node, "axis", -1);
  }

 private:
  int64_t half_ = 0, axis_ = -1;
};

OL_KERNEL_FACTORY(RotaryHalf)

}  // namespace onnx_light::ops
