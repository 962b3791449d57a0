// MatMulInteger: Y (INT32) = (A - a_zero_point) * (B - b_zero_point) with numpy matmul shapes
// (rank-1 operands promoted and the added dimension removed, batch dimensions broadcast), A
// and B each UINT8 or INT8. a_zero_point: one value or one per row of A's matrices (M values,
// shape [M] or [..., M, 1]); b_zero_point: one value or one per column (N values, [N] or
// [..., 1, N]); each of its input's type. Exact in int32 (ops/math/int8_gemm.h); a constant
// 2-D B (a quantized weight) is packed once and the pack serves every call, with A's batch
// folded into M.
#include <memory>
#include <mutex>
#include <string>

#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"
#include "ops/math/int8_gemm.h"
#include "ops/math/matmul_shape.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::RuntimeValue;
using core::runtime::ShapeNumel;
using core::runtime::ShapeToString;
using math::DataType;
using math::Shape;
using math::Tensor;

class MatMulInteger final : public core::runtime::KernelBase {
 public:
  explicit MatMulInteger(const core::runtime::KernelContext&) {}
  ~MatMulInteger() override {
    if (kept_) math::UncountPackedWeightBytes(kept_->bytes());
  }

  void OnConstantInput(size_t index, const RuntimeValue& value) override {
    if ((index == 1 || index == 3) && value.is_tensor()) constant_[index] = value.tensor();
  }

  void Compute(KernelCall& call) const override {
    Tensor a_dense, b_dense;
    const Tensor& a =
        call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
    const Tensor& b =
        call.input(1).contiguous() ? call.input(1) : (b_dense = call.input(1).Contiguous());
    CheckByteType(call, a, "A");
    CheckByteType(call, b, "B");
    const math::MatMulShape shape = math::MatMulShapes(call, a.shape(), b.shape());
    const int64_t m = shape.m, k = shape.k, n = shape.n;
    const Shape &a_batch = shape.a_batch, &b_batch = shape.b_batch, &batch = shape.batch;
    const Shape& out_shape = shape.out;
    const Tensor* a_zero = ZeroPoint(call, 2, a, m, "a_zero_point", "rows of A (M");
    const Tensor* b_zero = ZeroPoint(call, 3, b, n, "b_zero_point", "columns of B (N");
    Tensor& y = call.AllocateOutput(0, DataType::kInt32, out_shape);
    if (y.numel() == 0) return;
    int32_t* yp = y.mutable_data<int32_t>();
    const bool a_signed = a.dtype() == DataType::kInt8, b_signed = b.dtype() == DataType::kInt8;
    // A's zero points per row of one matrix: with A's batch folded into M they repeat.
    auto run = [&](const math::PackedInt8B& pack, const uint8_t* ap, int64_t rows, int32_t* out) {
      if (a_zero == nullptr || a_zero->numel() == 1 || rows == m) {
        math::Int8Gemm(pack, rows, ap, a_signed, k, a_zero ? a_zero->raw_data() : nullptr,
                       a_zero ? a_zero->numel() : 0, out, n);
        return;
      }
      for (int64_t r = 0; r < rows; r += m)
        math::Int8Gemm(pack, m, ap + r * k, a_signed, k, a_zero->raw_data(), m, out + r * n, n);
    };
    const auto* ab = static_cast<const uint8_t*>(a.raw_data());
    if (ShapeNumel(b_batch) == 1) {  // one B for every matrix of A: fold A's batch into M
      std::unique_ptr<const math::PackedInt8B> local;
      run(Packed(b, b_signed, k, n, b_zero, local), ab, ShapeNumel(batch) * m, yp);
      return;
    }
    const std::vector<int64_t> ai = math::BroadcastIndex(batch, a_batch);
    const std::vector<int64_t> bi = math::BroadcastIndex(batch, b_batch);
    const auto* bb = static_cast<const uint8_t*>(b.raw_data());
    for (size_t i = 0; i < ai.size(); ++i) {
      const math::PackedInt8B pack(bb + bi[i] * k * n, b_signed, k, n, n,
                                   b_zero ? b_zero->raw_data() : nullptr,
                                   b_zero ? b_zero->numel() : 0);
      run(pack, ab + ai[i] * m * k, m, yp + static_cast<int64_t>(i) * m * n);
    }
  }

 private:
  static void CheckByteType(KernelCall& call, const Tensor& t, const char* name) {
    if (t.dtype() != DataType::kUint8 && t.dtype() != DataType::kInt8)
      math::ThrowUnsupportedType(call.node(), std::string("input '") + name + "' (UINT8 or INT8)",
                                 t.dtype());
  }

  // Input `index` (a zero point) when given: its input's type, and one value or `count`.
  static const Tensor* ZeroPoint(KernelCall& call, size_t index, const Tensor& of, int64_t count,
                                 const char* name, const char* per) {
    if (!call.has_input(index)) return nullptr;
    const Tensor& z = call.input(index);
    if (z.dtype() != of.dtype())
      call.Fail(std::string(name) + " is " + core::DataTypeName(z.dtype()) + " but its input is " +
                core::DataTypeName(of.dtype()));
    if (z.numel() != 1 && z.numel() != count)
      call.Fail(std::string(name) + " " + ShapeToString(z.shape()) +
                " must hold one value or one per " + per + " = " + std::to_string(count) +
                "); zero points that vary across the batch are not supported");
    if (!z.contiguous()) call.Fail(std::string(name) + " must be dense");
    return &z;
  }

  // B's pack: the kept one when B (and its zero point) are the plan's constants, else one
  // made for this call in `local`.
  const math::PackedInt8B& Packed(const Tensor& b, bool b_signed, int64_t k, int64_t n,
                                  const Tensor* b_zero,
                                  std::unique_ptr<const math::PackedInt8B>& local) const {
    auto same = [](const Tensor& kept, const Tensor& t) {
      return kept.defined() && kept.dtype() == t.dtype() && kept.shape() == t.shape() &&
             kept.contiguous() && kept.raw_data() == t.raw_data();
    };
    const bool constant =
        same(constant_[1], b) && (b_zero == nullptr || same(constant_[3], *b_zero));
    auto make = [&] {
      return std::make_unique<const math::PackedInt8B>(b.raw_data(), b_signed, k, n, n,
                                                       b_zero ? b_zero->raw_data() : nullptr,
                                                       b_zero ? b_zero->numel() : 0);
    };
    if (!constant) return *(local = make());
    core::runtime::CallOnceIsolated(once_, [&] {
      kept_ = make();
      math::CountPackedWeightBytes(kept_->bytes());
    });
    return *kept_;
  }

  Tensor constant_[4];
  mutable std::once_flag once_;
  mutable std::unique_ptr<const math::PackedInt8B> kept_;
};

OL_KERNEL_FACTORY(MatMulInteger)

}  // namespace onnx_light::ops
