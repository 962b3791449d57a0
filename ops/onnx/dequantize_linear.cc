// DequantizeLinear: y = (x - x_zero_point) * x_scale, per tensor, per axis or blocked
// (ops/math/quantize.h). y has the scale's type (FLOAT/FLOAT16/BFLOAT16), or output_dtype
// (opset 23). x is INT8/UINT8/INT16/UINT16/INT4/UINT4/INT2/UINT2 or INT32 (zero point 0).
#include <cstring>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class DequantizeLinear final : public core::runtime::KernelBase {
 public:
  explicit DequantizeLinear(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& scale_t = call.input(1);
    const Tensor* zp_t = call.has_input(2) ? &call.input(2) : nullptr;
    const DataType xt = x.dtype();
    if (!math::IsQuantizedIntType(xt) && xt != DataType::kInt32)
      math::ThrowUnsupportedType(call.node(), "input 'x'", xt);
    if (!math::IsFloatType(scale_t.dtype()))
      math::ThrowUnsupportedType(call.node(), "input 'x_scale'", scale_t.dtype());
    const DataType out_type =
        output_dtype_ != DataType::kUndefined ? output_dtype_ : scale_t.dtype();
    if (!math::IsFloatType(out_type)) math::ThrowUnsupportedType(call.node(), "output", out_type);
    const math::AffineLayout layout(call.node(), x.shape(), scale_t, axis_, block_size_);
    if (zp_t != nullptr) {
      layout.CheckZeroPoint(call.node(), scale_t, *zp_t);
      if (zp_t->dtype() != xt)
        call.Fail("x is " + core::DataTypeName(xt) + " but x_zero_point is " +
                  core::DataTypeName(zp_t->dtype()));
    }
    const math::FloatView scale(scale_t);
    std::vector<int32_t> zp(static_cast<size_t>(scale_t.numel()), 0);
    if (zp_t != nullptr)
      for (int64_t i = 0; i < zp_t->numel(); ++i)
        zp[static_cast<size_t>(i)] = math::QuantGet(zp_t->dtype(), zp_t->raw_data(), i);

    Tensor& y = call.AllocateOutput(0, out_type, x.shape());
    math::FloatSink yv(y);
    float* yp = yv.data();
    const void* xp = x.raw_data();
    const int64_t inner = layout.inner(), stride = layout.stride();
    const int64_t rows = layout.outer() * layout.n();
    math::ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                      [&](int64_t r0, int64_t r1) {
                        for (int64_t r = r0; r < r1; ++r) {
                          const int64_t base = layout.Base(r / layout.n(), r % layout.n());
                          const int64_t off = r * inner;
                          for (int64_t i = 0; i < inner; ++i) {
                            const int64_t p = base + stride * i;
                            const int32_t q = math::QuantGet(xt, xp, off + i);
                            yp[off + i] = static_cast<float>(q - zp[static_cast<size_t>(p)]) *
                                          scale.data()[p];
                          }
                        }
                      });
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 1);
    block_size_ = core::runtime::AttrInt(node, "block_size", 0);
    output_dtype_ = static_cast<DataType>(core::runtime::AttrInt(node, "output_dtype", 0));
  }

 private:
  int64_t axis_ = 1;
  int64_t block_size_ = 0;
  DataType output_dtype_ = DataType::kUndefined;
};

OL_KERNEL_FACTORY(DequantizeLinear)

}  // namespace onnx_light::ops
