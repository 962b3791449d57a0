// CumSum: running sum along `axis` (input 1, a 0-D or 1-element INT32/INT64 tensor);
// `exclusive` leaves out the current element, `reverse` runs from the end.
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

namespace {

template <typename T>
void Scan(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  math::ParallelFor(outer, 1, [&](int64_t o0, int64_t o1) {
    std::vector<T> acc(static_cast<size_t>(inner));
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t s = 0; s < n; ++s) {
        const int64_t i = reverse ? n - 1 - s : s;
        const T* xr = x + (o * n + i) * inner;
        T* yr = y + (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) {
          if (exclusive) {
            yr[j] = acc[j];
            acc[j] += xr[j];
          } else {
            acc[j] += xr[j];
            yr[j] = acc[j];
          }
        }
      }
    }
  });
}

}  // namespace

class CumSum final : public core::runtime::KernelBase {
 public:
  explicit CumSum(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    if (rank == 0) call.Fail("input 'x' must have rank >= 1");
    const int64_t axis = math::NormalizeAxis(
        call.node(), math::ScalarInt(call.node(), call.input(1), "input 'axis'"), rank);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.shape()[d];
      if (d > axis) inner *= x.shape()[d];
    }
    const int64_t n = x.shape()[axis];
    const DataType dt = x.dtype();
    Tensor& y = call.AllocateOutput(0, dt, x.shape());
    if (x.numel() == 0) return;
    switch (dt) {
      case DataType::kFloat:
        return Scan(x.data<float>(), y.mutable_data<float>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kDouble:
        return Scan(x.data<double>(), y.mutable_data<double>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kInt32:
        return Scan(x.data<int32_t>(), y.mutable_data<int32_t>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kInt64:
        return Scan(x.data<int64_t>(), y.mutable_data<int64_t>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kUint32:
        return Scan(x.data<uint32_t>(), y.mutable_data<uint32_t>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kUint64:
        return Scan(x.data<uint64_t>(), y.mutable_data<uint64_t>(), outer, n, inner, exclusive_,
                    reverse_);
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const math::FloatView xv(x);
        math::FloatSink yv(y);
        Scan(xv.data(), yv.data(), outer, n, inner, exclusive_, reverse_);
        return yv.Finish();
      }
      default:
        math::ThrowUnsupportedType(call.node(), "input 'x'", dt);
    }
  }

 protected:
  void Configure(const NodeProto& node) override {
    exclusive_ = core::runtime::AttrInt(node, "exclusive", 0) != 0;
    reverse_ = core::runtime::AttrInt(node, "reverse", 0) != 0;
  }

 private:
  bool exclusive_ = false;
  bool reverse_ = false;
};

OL_KERNEL_FACTORY(CumSum)

}  // namespace onnx_light::ops
