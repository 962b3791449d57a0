// QuantizeLinear: y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor, per
// axis or blocked (ops/math/quantize.h). The output type is the zero point's, else
// output_dtype (opset 21), else UINT8. x is FLOAT/FLOAT16/BFLOAT16 (or INT32), computed in
// float. Integer outputs only: float8/float4 outputs are not implemented.
#include <cmath>
#include <cstring>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class QuantizeLinear final : public core::runtime::KernelBase {
 public:
  explicit QuantizeLinear(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const Tensor& scale_t = call.input(1);
    const Tensor* zp_t = call.has_input(2) ? &call.input(2) : nullptr;
    DataType out_type = output_dtype_ != DataType::kUndefined ? output_dtype_ : DataType::kUint8;
    if (zp_t != nullptr) {
      if (output_dtype_ != DataType::kUndefined && output_dtype_ != zp_t->dtype())
        call.Fail("output_dtype " + core::DataTypeName(output_dtype_) +
                  " differs from the zero point's type " + core::DataTypeName(zp_t->dtype()));
      out_type = zp_t->dtype();
    }
    if (!math::IsQuantizedIntType(out_type))
      math::ThrowUnsupportedType(call.node(), "output", out_type);
    if (!math::IsFloatType(scale_t.dtype()))
      math::ThrowUnsupportedType(call.node(), "input 'y_scale'", scale_t.dtype());
    const math::AffineLayout layout(call.node(), x.shape(), scale_t, axis_, block_size_);
    if (zp_t != nullptr) layout.CheckZeroPoint(call.node(), scale_t, *zp_t);

    std::vector<float> xf;
    const float* xp;
    if (math::IsFloatType(x.dtype())) {
      xf.resize(static_cast<size_t>(x.numel()));
      math::ToFloat(x.dtype(), x.raw_data(), xf.data(), x.numel());
      xp = xf.data();
    } else if (x.dtype() == DataType::kInt32) {
      xf.assign(x.data<int32_t>(), x.data<int32_t>() + x.numel());
      xp = xf.data();
    } else {
      math::ThrowUnsupportedType(call.node(), "input 'x'", x.dtype());
    }
    const math::FloatView scale(scale_t);
    std::vector<int32_t> zp(static_cast<size_t>(scale_t.numel()), 0);
    if (zp_t != nullptr)
      for (int64_t i = 0; i < zp_t->numel(); ++i)
        zp[static_cast<size_t>(i)] = math::QuantGet(zp_t->dtype(), zp_t->raw_data(), i);
    int32_t lo, hi;
    math::QuantRange(out_type, &lo, &hi);

    Tensor& y = call.AllocateOutput(0, out_type, x.shape());
    void* yp = y.mutable_raw_data();
    std::memset(yp, 0, y.nbytes());
    const bool packed = core::IsPacked(out_type);
    const int64_t inner = layout.inner(), stride = layout.stride();
    auto row = [&](int64_t o, int64_t a) {
      const int64_t base = layout.Base(o, a);
      const int64_t off = (o * layout.n() + a) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t p = base + stride * i;
        float q = std::nearbyint(xp[off + i] / scale.data()[p]);
        if (std::isnan(q)) q = 0.0f;
        const float v = std::clamp(q + static_cast<float>(zp[static_cast<size_t>(p)]),
                                   static_cast<float>(lo), static_cast<float>(hi));
        Store(out_type, packed, yp, off + i, static_cast<int32_t>(v));
      }
    };
    const int64_t rows = layout.outer() * layout.n();
    if (packed) {  // two elements share a byte: one writer
      for (int64_t r = 0; r < rows; ++r) row(r / layout.n(), r % layout.n());
    } else {
      math::ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                        [&](int64_t r0, int64_t r1) {
                          for (int64_t r = r0; r < r1; ++r) row(r / layout.n(), r % layout.n());
                        });
    }
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 1);
    block_size_ = core::runtime::AttrInt(node, "block_size", 0);
    output_dtype_ = static_cast<DataType>(core::runtime::AttrInt(node, "output_dtype", 0));
    if (core::runtime::AttrInt(node, "precision", 0) != 0)
      core::Throw(core::ErrorCode::kNotImplemented,
                  core::runtime::NodeLabel(node) + ": the precision attribute is not supported");
  }

 private:
  static void Store(DataType t, bool packed, void* y, int64_t i, int32_t v) {
    if (packed) return core::PackedSet(t, y, i, v);
    switch (t) {
      case DataType::kInt8:
        static_cast<int8_t*>(y)[i] = static_cast<int8_t>(v);
        return;
      case DataType::kUint8:
        static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(v);
        return;
      case DataType::kInt16:
        static_cast<int16_t*>(y)[i] = static_cast<int16_t>(v);
        return;
      default:
        static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(v);
        return;
    }
  }

  int64_t axis_ = 1;
  int64_t block_size_ = 0;
  DataType output_dtype_ = DataType::kUndefined;
};

OL_KERNEL_FACTORY(QuantizeLinear)

}  // namespace onnx_light::ops
