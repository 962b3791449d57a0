#include "ops/math/softmax.h"

#include <vector>

#include "ops/math/rowops.h"

namespace onnx_light::ops::math {

namespace {

// rows x n x inner layout; softmax along n.
template <typename T>
void Run(const T* x, T* y, int64_t rows, int64_t n, int64_t inner, bool log_softmax) {
  if (inner == 1) {
    ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r)
                    SoftmaxRow(x + r * n, y + r * n, n, log_softmax);
                });
    return;
  }
  // Strided axis: gather each column into a contiguous row and scatter back.
  ParallelFor(rows * inner, 1, [&](int64_t c0, int64_t c1) {
    std::vector<T> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t base = (c / inner) * n * inner + c % inner;
      for (int64_t i = 0; i < n; ++i) in[i] = x[base + i * inner];
      SoftmaxRow(in.data(), out.data(), n, log_softmax);
      for (int64_t i = 0; i < n; ++i) y[base + i * inner] = out[i];
    }
  });
}

}  // namespace

void SoftmaxCompute(KernelCall& call, int64_t axis, bool coerce_2d, bool log_softmax) {
  const Tensor& x = call.input(0);
  const int64_t rank = x.rank();
  Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
  if (rank == 0) {
    // A scalar is its own (single-element) axis.
    if (axis != 0 && axis != -1) ThrowBadInput(call.node(), "axis out of range for a scalar");
  }
  const int64_t a = rank == 0 ? 0 : NormalizeAxis(call.node(), axis, rank);
  const Shape& s = x.shape();
  int64_t rows = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < a) {
      rows *= s[d];
    } else if (d == a || coerce_2d) {
      n *= s[d];
    } else {
      inner *= s[d];
    }
  }
  if (x.numel() == 0) return;
  switch (x.dtype()) {
    case DataType::kFloat:
      return Run(x.data<float>(), y.mutable_data<float>(), rows, n, inner, log_softmax);
    case DataType::kDouble:
      return Run(x.data<double>(), y.mutable_data<double>(), rows, n, inner, log_softmax);
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const FloatView xv(x);
      FloatSink yv(y);
      Run(xv.data(), yv.data(), rows, n, inner, log_softmax);
      return yv.Finish();
    }
    default:
      ThrowUnsupportedType(call.node(), "input 'input'", x.dtype());
  }
}

}  // namespace onnx_light::ops::math
