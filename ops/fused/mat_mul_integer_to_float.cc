// ai.onnx_light.fused::MatMulIntegerToFloat — what the plan substitutes (executor/fusion.cc)
// for the four nodes onnxruntime's quantize_dynamic writes per product,
//   Mul(Cast(MatMulInteger(A, W, a_zero, w_zero), FLOAT), Mul(a_scale, w_scale)),
// A, a_scale and a_zero being the outputs of one DynamicQuantizeLinear:
//   inputs  A [..., K] (UINT8/INT8), W [K, N] (INT8/UINT8, a plan constant), a_scale (FLOAT,
//           one value), w_scale (FLOAT constant, one value or [N]), optional a_zero (A's type,
//           one value), optional w_zero (W's type constant, one value or [N])
//   output  Y [..., N] = float(sum_k (A - a_zero)(W - w_zero)) * (a_scale * w_scale)
// The same FLOAT operations as the four nodes (the int32 rounded to FLOAT, times the product
// of the two scales), so the same bits; W is packed once (ops/math/int8_gemm.h) and the int32
// products never reach memory.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"
#include "ops/math/int8_gemm.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::RuntimeValue;
using core::runtime::ShapeToString;
using math::DataType;
using math::Tensor;

class MatMulIntegerToFloat final : public core::runtime::KernelBase {
 public:
  explicit MatMulIntegerToFloat(const core::runtime::KernelContext&) {}
  ~MatMulIntegerToFloat() override {
    if (packed_) math::UncountPackedWeightBytes(packed_->bytes());
  }

  void OnConstantInput(size_t index, const RuntimeValue& value) override {
    if ((index == 1 || index == 3 || index == 5) && value.is_tensor())
      constant_[index] = value.tensor();
  }

  void Compute(KernelCall& call) const override {
    for (size_t i : {size_t{1}, size_t{3}, size_t{5}})
      if (call.has_input(i) && !constant_[i].defined())
        call.Fail("input " + std::to_string(i) + " must be a plan constant");
    const Tensor& w = constant_[1];
    const Tensor* w_zero = constant_[5].defined() ? &constant_[5] : nullptr;
    core::runtime::CallOnceIsolated(once_, [&] {
      if (w.rank() != 2 || (w.dtype() != DataType::kInt8 && w.dtype() != DataType::kUint8) ||
          (w_zero != nullptr &&
           (w_zero->dtype() != w.dtype() || (w_zero->numel() != 1 && w_zero->numel() != w.dim(1)))))
        call.Fail("needs W [K, N] of INT8 or UINT8 and w_zero of W's type, one value or [N]");
      packed_ = std::make_unique<const math::PackedInt8B>(
          w.raw_data(), w.dtype() == DataType::kInt8, w.dim(0), w.dim(1), w.dim(1),
          w_zero ? w_zero->raw_data() : nullptr, w_zero ? w_zero->numel() : 0);
      math::CountPackedWeightBytes(packed_->bytes());
    });
    Tensor a_dense;
    const Tensor& a =
        call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
    const int64_t k = packed_->k(), n = packed_->n();
    if (a.dtype() != DataType::kUint8 && a.dtype() != DataType::kInt8)
      math::ThrowUnsupportedType(call.node(), "input 'A' (UINT8 or INT8)", a.dtype());
    if (a.rank() < 1 || a.dim(-1) != k)
      call.Fail("input 'A' " + ShapeToString(a.shape()) + " must end in K = " + std::to_string(k));
    const Tensor& a_scale = call.input(2);
    const Tensor& w_scale = constant_[3];
    if (a_scale.dtype() != DataType::kFloat || a_scale.numel() != 1 ||
        w_scale.dtype() != DataType::kFloat || (w_scale.numel() != 1 && w_scale.numel() != n))
      call.Fail("needs a_scale one FLOAT value and w_scale one FLOAT value or [N]");
    const Tensor* a_zero = call.has_input(4) ? &call.input(4) : nullptr;
    if (a_zero != nullptr && (a_zero->dtype() != a.dtype() || a_zero->numel() != 1))
      call.Fail("a_zero must be one value of A's type");
    // The scales' product per column, as Mul(a_scale, w_scale) computes it.
    const float as = a_scale.data<float>()[0];
    std::vector<float> scale(static_cast<size_t>(w_scale.numel()));
    for (size_t j = 0; j < scale.size(); ++j) scale[j] = as * w_scale.data<float>()[j];
    core::runtime::Shape shape = a.shape();
    shape.back() = n;
    Tensor& y = call.AllocateOutput(0, DataType::kFloat, shape);
    if (y.numel() == 0) return;
    math::Int8GemmToFloat(*packed_, a.numel() / k, a.raw_data(), a.dtype() == DataType::kInt8, k,
                          a_zero ? a_zero->raw_data() : nullptr, a_zero ? 1 : 0, scale.data(),
                          static_cast<int64_t>(scale.size()), y.mutable_data<float>(), n);
  }

 private:
  Tensor constant_[6];
  mutable std::once_flag once_;
  mutable std::unique_ptr<const math::PackedInt8B> packed_;
};

OL_KERNEL_FACTORY(MatMulIntegerToFloat)

}  // namespace onnx_light::ops
