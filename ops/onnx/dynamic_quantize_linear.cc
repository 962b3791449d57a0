// DynamicQuantizeLinear: x (FLOAT) to UINT8 with a scale and zero point computed from x, as
// the ONNX reference computes them (all zeros: y_scale 1, as onnxruntime; see
// ops/math/dynamic_quantize.h):
//   lo = min(0, min x), hi = max(0, max x), y_scale = hi == lo ? 1 : (hi - lo) / 255
//   y_zero_point = round_half_even(clamp(0 - lo / y_scale, 0, 255))
//   y = clamp(round_half_even(x / y_scale) + y_zero_point, 0, 255)
// NaN elements are left out of the range and quantize to the zero point (the reference's
// arithmetic would make them undefined integers).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/dynamic_quantize.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class DynamicQuantizeLinear final : public core::runtime::KernelBase {
 public:
  explicit DynamicQuantizeLinear(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    Tensor dense;
    const Tensor& x =
        call.input(0).contiguous() ? call.input(0) : (dense = call.input(0).Contiguous());
    if (x.dtype() != DataType::kFloat)
      math::ThrowUnsupportedType(call.node(), "input 'x' (only FLOAT)", x.dtype());
    const math::UInt8Quantization qp = math::DynamicUInt8Range(x.data<float>(), x.numel());
    Tensor& y = call.AllocateOutput(0, DataType::kUint8, x.shape());
    Tensor& scale = call.AllocateOutput(1, DataType::kFloat, {});
    Tensor& zero = call.AllocateOutput(2, DataType::kUint8, {});
    scale.mutable_data<float>()[0] = qp.scale;
    zero.mutable_data<uint8_t>()[0] = qp.zero_point;
    math::QuantizeUInt8(x.data<float>(), x.numel(), qp, y.mutable_data<uint8_t>());
  }
};

OL_KERNEL_FACTORY(DynamicQuantizeLinear)

}  // namespace onnx_light::ops
