// ArgMax: INT64 index of the largest element along `axis` (default 0); the first one on
// ties, or the last with select_last_index. keepdims (default 1) keeps the axis as 1.
// A NaN counts as the largest value (as numpy's argmax).
#include <cmath>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using math::DataType;
using math::Shape;
using math::Tensor;

namespace {

template <typename T>
bool Better(T v, T best, bool last) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(best)) return false;
    if (std::isnan(v)) return true;
  }
  return last ? v >= best : v > best;
}

template <typename T>
void Run(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, bool last) {
  math::ParallelFor(outer * inner, 256, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T* col = x + (c / inner) * n * inner + c % inner;
      int64_t best_i = 0;
      T best = col[0];
      for (int64_t i = 1; i < n; ++i) {
        if (Better(col[i * inner], best, last)) {
          best = col[i * inner];
          best_i = i;
        }
      }
      y[c] = best_i;
    }
  });
}

}  // namespace

class ArgMax final : public core::runtime::KernelBase {
 public:
  explicit ArgMax(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    const int64_t axis = math::NormalizeAxis(call.node(), axis_, std::max<int64_t>(rank, 1));
    Shape out_shape;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.shape()[d];
      if (d > axis) inner *= x.shape()[d];
      if (d != axis || keepdims_) out_shape.push_back(d == axis ? 1 : x.shape()[d]);
    }
    const int64_t n = rank == 0 ? 1 : x.shape()[axis];
    Tensor& y = call.AllocateOutput(0, DataType::kInt64, out_shape);
    if (y.numel() == 0) return;
    if (n == 0) call.Fail("cannot take ArgMax over an empty axis");
    int64_t* yp = y.mutable_data<int64_t>();
    switch (x.dtype()) {
      case DataType::kFloat:
        return Run(x.data<float>(), yp, outer, n, inner, last_);
      case DataType::kDouble:
        return Run(x.data<double>(), yp, outer, n, inner, last_);
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const math::FloatView xv(x);
        return Run(xv.data(), yp, outer, n, inner, last_);
      }
      case DataType::kInt8:
        return Run(x.data<int8_t>(), yp, outer, n, inner, last_);
      case DataType::kInt16:
        return Run(x.data<int16_t>(), yp, outer, n, inner, last_);
      case DataType::kInt32:
        return Run(x.data<int32_t>(), yp, outer, n, inner, last_);
      case DataType::kInt64:
        return Run(x.data<int64_t>(), yp, outer, n, inner, last_);
      case DataType::kUint8:
        return Run(x.data<uint8_t>(), yp, outer, n, inner, last_);
      case DataType::kUint16:
        return Run(x.data<uint16_t>(), yp, outer, n, inner, last_);
      case DataType::kUint32:
        return Run(x.data<uint32_t>(), yp, outer, n, inner, last_);
      case DataType::kUint64:
        return Run(x.data<uint64_t>(), yp, outer, n, inner, last_);
      default:
        math::ThrowUnsupportedType(call.node(), "input 'data'", x.dtype());
    }
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
    keepdims_ = core::runtime::AttrInt(node, "keepdims", 1) != 0;
    last_ = core::runtime::AttrInt(node, "select_last_index", 0) != 0;
  }

 private:
  int64_t axis_ = 0;
  bool keepdims_ = true;
  bool last_ = false;
};

OL_KERNEL_FACTORY(ArgMax)

}  // namespace onnx_light::ops
