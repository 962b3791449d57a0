// TopK (opset 11): the K largest (or smallest) elements along `axis` and their INT64
// indices, sorted; equal values keep the lower index first. K is input 1 (one INT64).
#include <algorithm>
#include <cmath>
#include <numeric>
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
void Run(const T* x, T* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner,
         int64_t k, bool largest) {
  math::ParallelFor(outer * inner, 16, [&](int64_t c0, int64_t c1) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t o = c / inner, j = c % inner;
      const T* col = x + o * n * inner + j;
      std::iota(idx.begin(), idx.end(), int64_t{0});
      // NaN orders as the largest value (as numpy's sort places it last).
      auto less = [&](int64_t a, int64_t b) {
        const T va = col[a * inner], vb = col[b * inner];
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(va) || std::isnan(vb)) return !std::isnan(va) && std::isnan(vb);
        }
        return va < vb;
      };
      auto before = [&](int64_t a, int64_t b) {
        if (largest ? less(b, a) : less(a, b)) return true;
        if (largest ? less(a, b) : less(b, a)) return false;
        return a < b;
      };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t out = o * k * inner + i * inner + j;
        values[out] = col[idx[static_cast<size_t>(i)] * inner];
        indices[out] = idx[static_cast<size_t>(i)];
      }
    }
  });
}

}  // namespace

class TopK final : public core::runtime::KernelBase {
 public:
  explicit TopK(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    if (rank == 0) call.Fail("input 'X' must have rank >= 1");
    const int64_t axis = math::NormalizeAxis(call.node(), axis_, rank);
    const int64_t k = math::ScalarInt(call.node(), call.input(1), "input 'K'");
    const int64_t n = x.shape()[axis];
    if (k < 0 || k > n)
      call.Fail("K = " + std::to_string(k) + " is outside [0, " + std::to_string(n) +
                "] for axis " + std::to_string(axis_));
    Shape out_shape = x.shape();
    out_shape[axis] = k;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.shape()[d];
      if (d > axis) inner *= x.shape()[d];
    }
    const DataType dt = x.dtype();
    // Values are computed into local storage first: both outputs may be unwanted.
    Tensor indices("", DataType::kInt64, out_shape, call.allocator());
    Tensor values("", dt, out_shape, call.allocator());
    int64_t* ip = indices.mutable_data<int64_t>();
    if (values.numel() > 0) {
      switch (dt) {
        case DataType::kFloat:
          Run(x.data<float>(), values.mutable_data<float>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kDouble:
          Run(x.data<double>(), values.mutable_data<double>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kFloat16:
        case DataType::kBFloat16: {
          const math::FloatView xv(x);
          math::FloatSink vv(values);
          Run(xv.data(), vv.data(), ip, outer, n, inner, k, largest_);
          vv.Finish();
          break;
        }
        case DataType::kInt8:
          Run(x.data<int8_t>(), values.mutable_data<int8_t>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kInt16:
          Run(x.data<int16_t>(), values.mutable_data<int16_t>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kInt32:
          Run(x.data<int32_t>(), values.mutable_data<int32_t>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kInt64:
          Run(x.data<int64_t>(), values.mutable_data<int64_t>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kUint8:
          Run(x.data<uint8_t>(), values.mutable_data<uint8_t>(), ip, outer, n, inner, k, largest_);
          break;
        case DataType::kUint16:
          Run(x.data<uint16_t>(), values.mutable_data<uint16_t>(), ip, outer, n, inner, k,
              largest_);
          break;
        case DataType::kUint32:
          Run(x.data<uint32_t>(), values.mutable_data<uint32_t>(), ip, outer, n, inner, k,
              largest_);
          break;
        case DataType::kUint64:
          Run(x.data<uint64_t>(), values.mutable_data<uint64_t>(), ip, outer, n, inner, k,
              largest_);
          break;
        default:
          math::ThrowUnsupportedType(call.node(), "input 'X'", dt);
      }
    }
    call.SetOutput(0, std::move(values));
    call.SetOutput(1, std::move(indices));
  }

 protected:
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", -1);
    largest_ = core::runtime::AttrInt(node, "largest", 1) != 0;
    // sorted = 0 leaves the order unspecified: the sorted order is a valid answer.
  }

 private:
  int64_t axis_ = -1;
  bool largest_ = true;
};

OL_KERNEL_FACTORY(TopK)

}  // namespace onnx_light::ops
