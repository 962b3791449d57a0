// Gemm: Y = alpha * op(A) * op(B) + beta * C, op = transpose when transA/transB, C
// unidirectionally broadcast to [M, N] (optional since opset 11). Float types run the
// packed SGEMM (FLOAT16/BFLOAT16 converted at the edges); DOUBLE a plain loop. A constant B
// (an initializer) is packed on its second use and the pack serves every later call
// (ConstantWeight).
#include "ops/math/gemm.h"

#include <optional>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::ShapeToString;
using math::DataType;
using math::Shape;
using math::Tensor;

class Gemm final : public core::runtime::KernelBase {
 public:
  explicit Gemm(const core::runtime::KernelContext&) {}

  void OnConstantInput(size_t index, const core::runtime::RuntimeValue& value) override {
    if (index == 1) weight_.Declare(value);
  }

  void Compute(KernelCall& call) const override {
    const Tensor& a = call.input(0);
    const Tensor& b = call.input(1);
    if (a.rank() != 2 || b.rank() != 2)
      call.Fail("A and B must be 2-D, got shapes " + ShapeToString(a.shape()) + " and " +
                ShapeToString(b.shape()));
    if (a.dtype() != b.dtype())
      call.Fail("A is " + core::DataTypeName(a.dtype()) + " but B is " +
                core::DataTypeName(b.dtype()));
    const int64_t m = trans_a_ ? a.shape()[1] : a.shape()[0];
    const int64_t k = trans_a_ ? a.shape()[0] : a.shape()[1];
    const int64_t kb = trans_b_ ? b.shape()[1] : b.shape()[0];
    const int64_t n = trans_b_ ? b.shape()[0] : b.shape()[1];
    if (k != kb)
      call.Fail("inner dimensions differ: A has shape " + ShapeToString(a.shape()) +
                (trans_a_ ? " (transposed)" : "") + " and B has shape " + ShapeToString(b.shape()) +
                (trans_b_ ? " (transposed)" : ""));
    const Shape out_shape{m, n};
    const Tensor* c = call.has_input(2) ? &call.input(2) : nullptr;
    std::vector<int64_t> c_index;
    if (c != nullptr) {
      if (c->dtype() != a.dtype())
        call.Fail("C is " + core::DataTypeName(c->dtype()) + " but A is " +
                  core::DataTypeName(a.dtype()));
      bool ok = c->rank() <= 2;
      for (int64_t i = 0; ok && i < c->rank(); ++i) {
        const int64_t want = out_shape[static_cast<size_t>(2 - c->rank() + i)];
        ok = c->shape()[i] == 1 || c->shape()[i] == want;
      }
      if (!ok)
        call.Fail("C of shape " + ShapeToString(c->shape()) + " does not broadcast to [" +
                  std::to_string(m) + ", " + std::to_string(n) + "]");
      c_index = math::BroadcastIndex(out_shape, c->shape());
    }
    const DataType dt = a.dtype();
    if (dt == DataType::kDouble) {
      Tensor& y = call.AllocateOutput(0, dt, out_shape);
      RunDouble(a.data<double>(), b.data<double>(), c ? c->data<double>() : nullptr, c_index,
                y.mutable_data<double>(), m, n, k);
      return;
    }
    if (!math::IsFloatType(dt)) math::ThrowUnsupportedType(call.node(), "input 'A'", dt);
    Tensor& y = call.AllocateOutput(0, dt, out_shape);
    if (y.numel() == 0) return;
    const math::FloatView av(a);
    std::optional<math::FloatView> bv;
    auto b_values = [&]() -> const float* {
      if (!bv) bv.emplace(b);
      return bv->data();
    };
    math::FloatSink yv(y);
    float* yp = yv.data();
    float beta = 0.0f;
    if (c != nullptr && beta_ != 0.0f) {
      const math::FloatView cv(*c);
      for (size_t i = 0; i < c_index.size(); ++i) yp[i] = beta_ * cv.data()[c_index[i]];
      beta = 1.0f;
    }
    math::GemmArgs g;
    g.trans_a = trans_a_;
    g.trans_b = trans_b_;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = alpha_;
    g.a = av.data();
    g.lda = a.shape()[1];
    g.ldb = b.shape()[1];
    g.beta = beta;
    g.c = yp;
    g.ldc = n;
    // A kept pack of a constant B replaces reading (and converting) B's values.
    const math::PackedB* pack =
        weight_.declared() ? weight_.Get(b, trans_b_, k, n, g.ldb, b_values) : nullptr;
    g.b = pack != nullptr ? nullptr : b_values();
    math::Sgemm(g, pack);
    yv.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    alpha_ = core::runtime::AttrFloat(node, "alpha", 1.0f);
    beta_ = core::runtime::AttrFloat(node, "beta", 1.0f);
    trans_a_ = core::runtime::AttrInt(node, "transA", 0) != 0;
    trans_b_ = core::runtime::AttrInt(node, "transB", 0) != 0;
  }

 private:
  void RunDouble(const double* a, const double* b, const double* c,
                 const std::vector<int64_t>& c_index, double* y, int64_t m, int64_t n,
                 int64_t k) const {
    const int64_t lda = trans_a_ ? m : k, ldb = trans_b_ ? k : n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += (trans_a_ ? a[p * lda + i] : a[i * lda + p]) *
               (trans_b_ ? b[j * ldb + p] : b[p * ldb + j]);
        double v = static_cast<double>(alpha_) * s;
        if (c != nullptr && beta_ != 0.0f)
          v += static_cast<double>(beta_) * c[c_index[static_cast<size_t>(i * n + j)]];
        y[i * n + j] = v;
      }
  }

  float alpha_ = 1.0f;
  float beta_ = 1.0f;
  bool trans_a_ = false;
  bool trans_b_ = false;
  math::ConstantWeight weight_;  // B when the plan declares it constant
};

OL_KERNEL_FACTORY(Gemm)

}  // namespace onnx_light::ops
