// SimplifiedLayerNormalization (default domain, opset 1, registered by onnxruntime; the
// genai builder writes it for the first RMS norm of a decoder). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (core/providers/cpu/nn/layer_norm.cc,
// layer_norm_impl.cc with simplified = true):
//   Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale
// Inputs: X (FLOAT, FLOAT16, BFLOAT16), scale (the normalised shape's element count).
// Outputs: Y; optional inv_std_var (FLOAT, X's shape with the normalised axes set to 1).
// Attributes: axis (default -1), epsilon (1e-5), stash_type (only 1 = float).
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/norm_rows.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Tensor;

class SimplifiedLayerNormalization final : public core::runtime::KernelBase {
 public:
  explicit SimplifiedLayerNormalization(const core::runtime::KernelContext&) {}

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& scale = call.input(1);
    if (!math::IsFloatType(x.dtype()) || x.rank() == 0)
      math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
    if (!math::IsFloatType(scale.dtype()))
      math::ThrowUnsupportedType(call.node(), "input 'scale'", scale.dtype());
    const int64_t axis = math::NormalizeAxis(call.node(), axis_, x.rank());
    int64_t d = 1;
    for (int64_t i = axis; i < x.rank(); ++i) d *= x.dim(i);
    if (scale.numel() != d)
      call.Fail("input 'scale' has " + std::to_string(scale.numel()) +
                " elements, the normalised shape has " + std::to_string(d));
    const int64_t rows = d == 0 ? 0 : x.numel() / d;
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    float* inv_std = nullptr;
    if (call.output_wanted(1)) {
      core::runtime::Shape stat_shape = x.shape();
      for (int64_t i = axis; i < x.rank(); ++i) stat_shape[static_cast<size_t>(i)] = 1;
      inv_std = call.AllocateOutput(1, core::DataType::kFloat, stat_shape).mutable_data<float>();
    }
    if (rows == 0) return;
    const math::FloatView xv(x), sv(scale);
    math::FloatSink yv(y);
    math::ParallelFor(rows, std::max<int64_t>(1, 16384 / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const auto stats = contrib::NormalizeRow(xv.data() + r * d, d, sv.data(), nullptr,
                                                 epsilon_, true, yv.data() + r * d);
        if (inv_std != nullptr) inv_std[r] = stats.inv_std;
      }
    });
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", -1);
    epsilon_ = core::runtime::AttrFloat(node, "epsilon", 1e-5f);
    const int64_t stash = core::runtime::AttrInt(node, "stash_type", 1);
    if (stash != 1)
      Throw(core::ErrorCode::kNotImplemented,
            core::runtime::NodeLabel(node) + ": stash_type " + std::to_string(stash) +
                " is not supported (only 1, float)");
  }

 private:
  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

OL_KERNEL_FACTORY(SimplifiedLayerNormalization)

}  // namespace onnx_light::ops
