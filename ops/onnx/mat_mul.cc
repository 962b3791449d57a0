// MatMul: numpy matmul semantics. Rank-1 operands are promoted (A to [1,K], B to [K,1]) and
// the added dimension removed from the result; batch dimensions broadcast. Float types go
// through the packed SGEMM (FLOAT16/BFLOAT16 converted at the edges; a FLOAT16 B with one
// matrix is read as 16 bits, math::HalfWeightGemm, never packed as FLOAT); a weight without
// batch dimensions folds the batch into M so that one GEMM streams it once. A constant B
// (an initializer, or a Transpose of one folded to a transposed view) is packed on its
// second use and the pack serves every later call, prompts and decode steps alike
// (ConstantWeight).
#include <optional>
#include <string>
#include <vector>

#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"
#include "ops/math/gemm.h"
#include "ops/math/half_gemm.h"
#include "ops/math/matmul_shape.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::ShapeNumel;
using core::runtime::ShapeToString;
using math::DataType;
using math::Shape;
using math::Tensor;

namespace {

template <typename T>
void NaiveMatMul(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    T* crow = c + i * n;
    std::fill(crow, crow + n, T(0));
    for (int64_t p = 0; p < k; ++p) {
      const T av = a[i * k + p];
      const T* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

}  // namespace

class MatMul final : public core::runtime::KernelBase {
 public:
  explicit MatMul(const core::runtime::KernelContext&) {}

  void OnConstantInput(size_t index, const core::runtime::RuntimeValue& value) override {
    if (index == 1) weight_.Declare(value);
  }

  // A strided FLOAT operand whose matrices are dense (an append-capacity cache such as
  // `MatMul(probs, present_value)`) is read matrix by matrix in place.
  bool ReadsStridedInput(size_t index) const override { return index <= 1; }

  // Generate's prompt step wants the logits of the last position only: the LM head then
  // multiplies one row per batch instead of one per prompt token.
  bool ComputesLastRowOnly() const override { return true; }

  void Compute(KernelCall& call) const override {
    Tensor a_dense, b_dense, a_last;
    const Tensor& a_full = InPlaceOrDense(call.input(0), a_dense);
    const Tensor& a = call.last_row_only() ? math::LastRows(call, a_full, a_last) : a_full;
    const Tensor& b = InPlaceOrDense(call.input(1), b_dense);
    if (a.dtype() != b.dtype())
      call.Fail("A is " + core::DataTypeName(a.dtype()) + " but B is " +
                core::DataTypeName(b.dtype()));
    const math::MatMulShape shape = math::MatMulShapes(call, a.shape(), b.shape());
    const int64_t m = shape.m, k = shape.k, n = shape.n;
    const Shape &a_batch = shape.a_batch, &b_batch = shape.b_batch, &batch = shape.batch;
    const Shape& out_shape = shape.out;
    const int64_t nb = ShapeNumel(batch);
    const DataType dt = a.dtype();
    switch (dt) {
      case DataType::kFloat:
      case DataType::kFloat16:
      case DataType::kBFloat16:
        break;
      case DataType::kDouble:
        return RunNaive<double>(call, a, b, batch, a_batch, b_batch, out_shape, m, n, k);
      case DataType::kInt32:
        return RunNaive<int32_t>(call, a, b, batch, a_batch, b_batch, out_shape, m, n, k);
      case DataType::kInt64:
        return RunNaive<int64_t>(call, a, b, batch, a_batch, b_batch, out_shape, m, n, k);
      case DataType::kUint32:
        return RunNaive<uint32_t>(call, a, b, batch, a_batch, b_batch, out_shape, m, n, k);
      case DataType::kUint64:
        return RunNaive<uint64_t>(call, a, b, batch, a_batch, b_batch, out_shape, m, n, k);
      default:
        math::ThrowUnsupportedType(call.node(), "input 'A'", dt);
    }
    Tensor& y = call.AllocateOutput(0, dt, out_shape);
    if (y.numel() == 0) return;
    const int64_t transposed_ld = math::ConstantWeight::TransposedLd(b);
    if (ShapeNumel(b_batch) == 1 && a.contiguous() && (b.contiguous() || transposed_ld > 0)) {
      MultiplyOneMatrix(a, b, transposed_ld, nb * m, n, k, y);
      return;
    }
    Tensor b_copy;
    const Tensor& bd = transposed_ld > 0 ? (b_copy = b.Contiguous()) : b;
    const math::FloatView av(a), bv(bd);
    math::FloatSink yv(y);
    {
      const std::vector<int64_t> ai = math::BroadcastIndex(batch, a_batch);
      const std::vector<int64_t> bi = math::BroadcastIndex(batch, b_batch);
      const float* ap = av.data();
      const float* bp = bv.data();
      float* yp = yv.data();
      // Matrix j of an operand: j * rows * cols when dense, else where its strides put it.
      auto matrix = [](const Tensor& t, const float* base, int64_t j, int64_t size) {
        return t.contiguous() ? base + j * size : base + t.BlockOffset(t.rank() - 2, j);
      };
      math::ParallelFor(nb, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          math::Sgemm(false, false, m, n, k, 1.0f, matrix(a, ap, ai[i], m * k),
                      matrix(bd, bp, bi[i], k * n), 0.0f, yp + i * m * n);
      });
    }
    yv.Finish();
  }

 private:
  // `t` itself when dense, a strided FLOAT tensor with dense matrices or a FLOAT or FLOAT16
  // matrix viewed transposed; else a dense copy kept in `holder`.
  static const Tensor& InPlaceOrDense(const Tensor& t, Tensor& holder) {
    if (t.contiguous()) return t;
    if (t.dtype() == DataType::kFloat && t.rank() >= 2 && t.DenseFrom(t.rank() - 2)) return t;
    if (math::ConstantWeight::TransposedLd(t) > 0) return t;
    return holder = t.Contiguous();
  }

  // Y[M, N] = A[M, K] * B with one B matrix (A's batch folded into M): B dense [K, N] or,
  // with `transposed_ld` > 0, a transposed view of a FLOAT or FLOAT16 [N, K] matrix with
  // that row stride. A declared constant B is served from its kept pack; then B's values are not
  // read (a FLOAT16 weight is not converted per call).
  void MultiplyOneMatrix(const Tensor& a, const Tensor& b, int64_t transposed_ld, int64_t m,
                         int64_t n, int64_t k, Tensor& y) const {
    if (b.dtype() == DataType::kFloat16) {
      // Read as 16 bits where it lies: no FLOAT pack of a FLOAT16 weight. A transposed view
      // (a tied embedding) is packed at once; unpacked (over the budget) it is copied dense.
      const math::FloatView av(a);
      math::FloatSink yv(y);
      const math::PackedHalfB* pack = weight_.declared() ? weight_.GetHalf(b, k, n) : nullptr;
      Tensor dense;
      if (pack != nullptr)
        math::HalfWeightGemm(av.data(), m, *pack, yv.data());
      else
        math::HalfWeightGemm(av.data(), m, k,
                             static_cast<const uint16_t*>(
                                 (transposed_ld > 0 ? (dense = b.Contiguous()) : b).raw_data()),
                             n, yv.data());
      yv.Finish();
      return;
    }
    std::optional<math::FloatView> bv;
    auto b_values = [&]() -> const float* {
      if (b.dtype() == DataType::kFloat) return static_cast<const float*>(b.strided_data());
      if (!bv) bv.emplace(b);
      return bv->data();
    };
    math::GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.trans_b = transposed_ld > 0;
    g.ldb = g.trans_b ? transposed_ld : n;
    const math::PackedB* pack =
        weight_.declared() ? weight_.Get(b, g.trans_b, k, n, g.ldb, b_values) : nullptr;
    const math::FloatView av(a);
    math::FloatSink yv(y);
    g.a = av.data();
    g.lda = k;
    g.b = pack != nullptr ? nullptr : b_values();
    g.c = yv.data();
    g.ldc = n;
    math::Sgemm(g, pack);
    yv.Finish();
  }

  template <typename T>
  static void RunNaive(KernelCall& call, const Tensor& a, const Tensor& b, const Shape& batch,
                       const Shape& a_batch, const Shape& b_batch, const Shape& out_shape,
                       int64_t m, int64_t n, int64_t k) {
    Tensor& y = call.AllocateOutput(0, a.dtype(), out_shape);
    const std::vector<int64_t> ai = math::BroadcastIndex(batch, a_batch);
    const std::vector<int64_t> bi = math::BroadcastIndex(batch, b_batch);
    T* yp = y.mutable_data<T>();
    for (size_t i = 0; i < ai.size(); ++i)
      NaiveMatMul<T>(a.data<T>() + ai[i] * m * k, b.data<T>() + bi[i] * k * n,
                     yp + static_cast<int64_t>(i) * m * n, m, n, k);
  }

  math::ConstantWeight weight_;  // B when the plan declares it constant
};

OL_KERNEL_FACTORY(MatMul)

}  // namespace onnx_light::ops
