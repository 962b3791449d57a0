// ai.onnx_light.fused::MatMulGroup — what the plan substitutes (executor/fusion.cc) for
// several MatMul nodes that multiply one input by different constant weights: the Q/K/V
// projections of an attention layer, the gate/up projections of a gated MLP.
//   inputs  A [..., K] (FLOAT or FLOAT16), B_1 .. B_n ([K, N_i] of A's type, plan constants)
//   outputs Y_i = A * B_i, shape [..., N_i]
// FLOAT16 weights are read as 16 bits (math::HalfWeightGemm; side by side as 16-bit panels
// once packed), computed in FLOAT and rounded once.
// Why: a decode step is bound by reading the weights, and one product over the weights
// side by side (ConstantWeightGroup) streams them in one parallel pass instead of n short
// ones, each paying its own fork/join; a prompt packs A once instead of n times. The
// products land in one [M, sum N_i] scratch, then each Y_i takes its columns.
#include <vector>

#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"
#include "ops/math/gemm.h"
#include "ops/math/half_gemm.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::ShapeToString;
using math::DataType;
using math::Shape;
using math::Tensor;

class MatMulGroup final : public core::runtime::KernelBase {
 public:
  explicit MatMulGroup(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    weights_ = std::make_unique<math::ConstantWeightGroup>(
        static_cast<size_t>(std::max(0, node.input_size() - 1)));
  }

  void OnConstantInput(size_t index, const core::runtime::RuntimeValue& value) override {
    if (index >= 1) weights_->Declare(index - 1, value);
  }

  void Compute(KernelCall& call) const override {
    const size_t count = call.input_count() - 1;
    if (call.input_count() < 2 || call.output_count() != count)
      call.Fail("needs A and one weight per output");
    Tensor a_dense;
    const Tensor& a =
        call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
    const DataType dt = a.dtype();
    if ((dt != DataType::kFloat && dt != DataType::kFloat16) || a.rank() == 0)
      math::ThrowUnsupportedType(call.node(), "input 'A'", dt);
    const int64_t k = a.dim(-1), m = k == 0 ? 0 : a.numel() / k;
    std::vector<const Tensor*> b(count);
    std::vector<Tensor*> y(count, nullptr);
    for (size_t i = 0; i < count; ++i) {
      b[i] = &call.input(i + 1);
      if (b[i]->dtype() != dt || b[i]->rank() != 2 || b[i]->dim(0) != k)
        call.Fail("weight " + std::to_string(i + 1) + " must be " + core::DataTypeName(dt) +
                  " [K = " + std::to_string(k) + ", N], got " + core::DataTypeName(b[i]->dtype()) +
                  " " + ShapeToString(b[i]->shape()));
      Shape shape = a.shape();
      shape.back() = b[i]->dim(1);
      if (call.output_wanted(i)) y[i] = &call.AllocateOutput(i, dt, shape);
    }
    if (m == 0) return;
    if (dt == DataType::kFloat16) return MultiplyHalf(call, a, b, y, m, k);
    const math::PackedB* pack = weights_->Get(b);
    if (pack == nullptr) return MultiplyEach(call, a, b, y, m, k);
    MultiplyPacked(call, a, *pack, b, y, m, k);
  }

 private:
  // First call, or weights that cannot be packed: one Sgemm per weight.
  static void MultiplyEach(KernelCall& call, const Tensor& a, const std::vector<const Tensor*>& b,
                           const std::vector<Tensor*>& y, int64_t m, int64_t k) {
    for (size_t i = 0; i < b.size(); ++i) {
      if (y[i] == nullptr) continue;
      const Tensor bd = b[i]->contiguous() ? *b[i] : b[i]->Contiguous();
      const int64_t n = bd.dim(1);
      math::Sgemm(false, false, m, n, k, 1.0f, a.data<float>(), bd.data<float>(), 0.0f,
                  y[i]->mutable_data<float>());
    }
    (void)call;
  }

  void MultiplyPacked(KernelCall& call, const Tensor& a, const math::PackedB& pack,
                      const std::vector<const Tensor*>& b, const std::vector<Tensor*>& y, int64_t m,
                      int64_t k) const {
    const int64_t width = weights_->width();
    // From the call's allocator: recycled from step to step, no fresh pages per token.
    auto scratch = call.allocator().Allocate(static_cast<size_t>(m * width) * sizeof(float));
    float* c = static_cast<float*>(scratch.get());
    math::GemmArgs g;
    g.m = m;
    g.n = width;
    g.k = k;
    g.a = a.data<float>();
    g.lda = k;
    g.c = c;
    g.ldc = width;
    math::Sgemm(g, &pack);
    for (size_t i = 0; i < b.size(); ++i) {
      if (y[i] == nullptr) continue;
      math::CopyColumns(c, m, width, weights_->offset(i), b[i]->dim(1), DataType::kFloat,
                        y[i]->mutable_raw_data());
    }
  }

  // FLOAT16: one product over the 16-bit panels side by side once packed, else one per
  // weight on its row-major 16 bits; each Y_i rounded once from FLOAT.
  void MultiplyHalf(KernelCall& call, const Tensor& a, const std::vector<const Tensor*>& b,
                    const std::vector<Tensor*>& y, int64_t m, int64_t k) const {
    const math::FloatView av(a);
    const math::PackedHalfB* pack = weights_->GetHalf(b);
    if (pack == nullptr) {
      for (size_t i = 0; i < b.size(); ++i) {
        if (y[i] == nullptr) continue;
        const Tensor bd = b[i]->contiguous() ? *b[i] : b[i]->Contiguous();
        math::FloatSink out(*y[i]);
        math::HalfWeightGemm(av.data(), m, k, static_cast<const uint16_t*>(bd.raw_data()),
                             bd.dim(1), out.data());
        out.Finish();
      }
      return;
    }
    const int64_t width = weights_->width();
    auto scratch = call.allocator().Allocate(static_cast<size_t>(m * width) * sizeof(float));
    float* c = static_cast<float*>(scratch.get());
    math::HalfWeightGemm(av.data(), m, *pack, c);
    for (size_t i = 0; i < b.size(); ++i) {
      if (y[i] == nullptr) continue;
      math::CopyColumns(c, m, width, weights_->offset(i), b[i]->dim(1), DataType::kFloat16,
                        y[i]->mutable_raw_data());
    }
  }

  std::unique_ptr<math::ConstantWeightGroup> weights_;
};

OL_KERNEL_FACTORY(MatMulGroup)

}  // namespace onnx_light::ops
