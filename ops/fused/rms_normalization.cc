// ai.onnx_light.fused::RMSNormalization — what the plan substitutes for the decomposed RMS
// norm exporters write (executor/fusion.cc): Pow(X, 2), ReduceMean over the last axis
// (keepdims), Add(epsilon), Sqrt, Reciprocal + Mul (or Div), and an optional Mul by a
// constant scale. Y = X / sqrt(mean(X^2) + epsilon) [* scale], one pass per row, with the
// same float operations in the same order as the replaced nodes.
// Inputs: X (FLOAT, FLOAT16, BFLOAT16), optional scale (broadcast over rows of X).
#include <cmath>

#include "executor/attributes.h"
#include "ops/fused/row_broadcast.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Tensor;

class FusedRMSNormalization final : public core::runtime::KernelBase {
 public:
  explicit FusedRMSNormalization(const core::runtime::KernelContext&) {}

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    if (!math::IsFloatType(x.dtype()) || x.rank() == 0)
      math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
    const Tensor* scale = call.has_input(1) ? &call.input(1) : nullptr;
    const int64_t d = x.dim(-1), rows = d == 0 ? 0 : x.numel() / d;
    std::vector<int64_t> scale_rows;
    if (scale != nullptr) scale_rows = fused::RowOffsets(call, x.shape(), scale->shape(), "scale");
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    if (rows == 0) return;
    const math::FloatView xv(x);
    std::optional<math::FloatView> sv;
    if (scale != nullptr) sv.emplace(*scale);
    math::FloatSink yv(y);
    const float* xp = xv.data();
    float* yp = yv.data();
    const float inv_d = 1.0f / static_cast<float>(d);
    math::ParallelFor(rows, std::max<int64_t>(1, 16384 / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = xp + r * d;
        float sum = 0.0f;
        for (int64_t j = 0; j < d; ++j) sum += row[j] * row[j];
        const float inv = 1.0f / std::sqrt(sum * inv_d + epsilon_);
        float* out = yp + r * d;
        if (sv) {
          const float* s = sv->data() + scale_rows[static_cast<size_t>(r)];
          for (int64_t j = 0; j < d; ++j) out[j] = s[j] * (row[j] * inv);
        } else {
          for (int64_t j = 0; j < d; ++j) out[j] = row[j] * inv;
        }
      }
    });
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    epsilon_ = core::runtime::AttrFloat(node, "epsilon", 0.0f);
  }

 private:
  float epsilon_ = 0.0f;
};

OL_KERNEL_FACTORY(FusedRMSNormalization)

}  // namespace onnx_light::ops
