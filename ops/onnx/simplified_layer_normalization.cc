// SimplifiedLayerNormalization: RMS normalisation as onnxruntime's tools write it for
// Llama-style models (in the default domain, also accepted under com.microsoft). Y has the
// scale's type; optional output 1 is inv_std_var (FLOAT, shape X.shape[:axis] + [1, ...]).
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/norm.h"
#include "ops/math/rowops.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class SimplifiedLayerNormalization final : public core::runtime::KernelBase {
 public:
  explicit SimplifiedLayerNormalization(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& scale_t = call.input(1);
    const math::NormLayout l = math::MakeNormLayout(call.node(), x.shape(), axis_);
    const bool want_inv = call.output_wanted(1);
    std::vector<float> inv(want_inv ? static_cast<size_t>(l.rows) : 0);
    if (x.dtype() == DataType::kDouble) {
      const math::ParamView<double> scale(call.node(), scale_t, l, "scale");
      Tensor& y = call.AllocateOutput(0, DataType::kDouble, x.shape());
      const double* xp = x.data<double>();
      double* yp = y.mutable_data<double>();
      math::ParallelFor(l.rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double s;
          math::RmsNormRow(xp + r * l.d, scale.data(), yp + r * l.d, l.d, epsilon_, &s);
          if (want_inv) inv[static_cast<size_t>(r)] = static_cast<float>(s);
        }
      });
    } else {
      if (!math::IsFloatType(x.dtype()))
        math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
      const math::ParamView<float> scale(call.node(), scale_t, l, "scale");
      Tensor& y = call.AllocateOutput(0, scale_t.dtype(), x.shape());
      const math::FloatView xv(x);
      math::FloatSink yv(y);
      math::ParallelFor(l.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(l.d, 1)),
                        [&](int64_t r0, int64_t r1) {
                          for (int64_t r = r0; r < r1; ++r)
                            math::RmsNormRow(xv.data() + r * l.d, scale.data(), yv.data() + r * l.d,
                                             l.d, epsilon_, want_inv ? inv.data() + r : nullptr);
                        });
      yv.Finish();
    }
    if (want_inv) call.SetOutput(1, Tensor::FromFloat("", l.stat_shape, std::move(inv)));
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", -1);
    epsilon_ = core::runtime::AttrFloat(node, "epsilon", 1e-5f);
    math::CheckStashType(node);
  }

 private:
  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

OL_KERNEL_FACTORY(SimplifiedLayerNormalization)

}  // namespace onnx_light::ops
