// LayerNormalization (opset 17): Y = (X - mean) / sqrt(var + epsilon) * Scale + B over the
// dimensions from `axis` on. Optional outputs Mean and InvStdDev have shape
// X.shape[:axis] + [1, ...] and the stash type (FLOAT).
#include <optional>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/norm.h"
#include "ops/math/rowops.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class LayerNormalization final : public core::runtime::KernelBase {
 public:
  explicit LayerNormalization(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const math::NormLayout l = math::MakeNormLayout(call.node(), x.shape(), axis_);
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    // Row statistics go to local buffers first: unwanted outputs share one scratch slot.
    const bool want_stats = call.output_wanted(1) || call.output_wanted(2);
    std::vector<float> mean(want_stats ? static_cast<size_t>(l.rows) : 0);
    std::vector<float> inv(mean.size());
    float* mp = mean.data();
    float* ip = inv.data();
    if (x.dtype() == DataType::kDouble) {
      const math::ParamView<double> scale(call.node(), call.input(1), l, "Scale");
      std::optional<math::ParamView<double>> bias;
      if (call.has_input(2)) bias.emplace(call.node(), call.input(2), l, "B");
      const double* xp = x.data<double>();
      double* yp = y.mutable_data<double>();
      math::ParallelFor(l.rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double m, s;
          math::LayerNormRow(xp + r * l.d, scale.data(), bias ? bias->data() : nullptr,
                             yp + r * l.d, l.d, epsilon_, &m, &s);
          if (want_stats) {
            mp[r] = static_cast<float>(m);
            ip[r] = static_cast<float>(s);
          }
        }
      });
      return SetStats(call, l, std::move(mean), std::move(inv));
    }
    if (!math::IsFloatType(x.dtype()))
      math::ThrowUnsupportedType(call.node(), "input 'X'", x.dtype());
    const math::ParamView<float> scale(call.node(), call.input(1), l, "Scale");
    std::optional<math::ParamView<float>> bias;
    if (call.has_input(2)) bias.emplace(call.node(), call.input(2), l, "B");
    const math::FloatView xv(x);
    math::FloatSink yv(y);
    math::ParallelFor(l.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(l.d, 1)),
                      [&](int64_t r0, int64_t r1) {
                        for (int64_t r = r0; r < r1; ++r)
                          math::LayerNormRow(xv.data() + r * l.d, scale.data(),
                                             bias ? bias->data() : nullptr, yv.data() + r * l.d,
                                             l.d, epsilon_, want_stats ? mp + r : nullptr,
                                             want_stats ? ip + r : nullptr);
                      });
    yv.Finish();
    SetStats(call, l, std::move(mean), std::move(inv));
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", -1);
    epsilon_ = core::runtime::AttrFloat(node, "epsilon", 1e-5f);
    math::CheckStashType(node);
  }

 private:
  static void SetStats(core::runtime::KernelCall& call, const math::NormLayout& l,
                       std::vector<float> mean, std::vector<float> inv) {
    if (call.output_wanted(1))
      call.SetOutput(1, Tensor::FromFloat("", l.stat_shape, std::move(mean)));
    if (call.output_wanted(2))
      call.SetOutput(2, Tensor::FromFloat("", l.stat_shape, std::move(inv)));
  }

  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

OL_KERNEL_FACTORY(LayerNormalization)

}  // namespace onnx_light::ops
