// Slice: per axis, elements start, start + step, ... before end. Negative starts/ends
// count from the end, out-of-range values are clamped (to [0, dim] for positive steps and
// [-1, dim - 1] for negative ones), steps may be negative but not 0. Opset 1-9 take
// starts/ends/axes as attributes, 10+ as inputs (with steps). A result that is one
// contiguous block of the input is a view on its bytes.
#include <algorithm>

#include "ops/elementwise/copy.h"
#include "ops/elementwise/view.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

template <bool kInputs>
class SliceKernel final : public core::runtime::KernelBase {
 public:
  explicit SliceKernel(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    if (!kInputs) {
      starts_ = core::runtime::AttrInts(node, "starts");
      ends_ = core::runtime::AttrInts(node, "ends");
      axes_ = core::runtime::OptionalAttrInts(node, "axes");
    }
  }

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> starts = starts_, ends = ends_, steps;
    std::optional<std::vector<int64_t>> axes = axes_;
    if (kInputs) {
      starts = elementwise::ReadInt64s(call, call.input(1), "starts");
      ends = elementwise::ReadInt64s(call, call.input(2), "ends");
      if (call.has_input(3)) axes = elementwise::ReadInt64s(call, call.input(3), "axes");
      if (call.has_input(4)) steps = elementwise::ReadInt64s(call, call.input(4), "steps");
    }
    const size_t n = starts.size();
    if (ends.size() != n || (axes && axes->size() != n) || (!steps.empty() && steps.size() != n))
      call.Fail("starts, ends, axes and steps must have the same length: " +
                elementwise::DescribeInputs(call));
    if (steps.empty()) steps.assign(n, 1);
    std::vector<int64_t> start(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
    Shape out_shape = x.shape();
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < n; ++i) {
      const int64_t axis =
          elementwise::NormalizeAxis(call, axes ? (*axes)[i] : static_cast<int64_t>(i), rank);
      const size_t a = static_cast<size_t>(axis);
      if (seen[a]) call.Fail("axes repeat axis " + std::to_string(axis));
      seen[a] = true;
      const int64_t dim = x.shape()[a];
      const int64_t st = steps[i];
      if (st == 0) call.Fail("steps must not be 0");
      int64_t s = starts[i], e = ends[i];
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      int64_t count;
      if (st > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        count = e > s ? 1 + (e - s - 1) / st : 0;  // ceil((e - s) / st) without overflow
      } else if (dim == 0) {
        s = 0;
        count = 0;
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        const int64_t back = st == INT64_MIN ? INT64_MAX : -st;  // -INT64_MIN overflows
        count = s > e ? 1 + (s - e - 1) / back : 0;
      }
      start[a] = count > 0 ? s : 0;
      step[a] = st;
      out_shape[a] = count;
    }
    const std::vector<int64_t> in_strides = core::runtime::DenseStrides(x.shape());
    int64_t base = 0;
    std::vector<int64_t> strides(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
      base += start[d] * in_strides[d];
      strides[d] = step[d] * in_strides[d];
    }
    const int64_t numel = core::runtime::ShapeNumel(out_shape);
    if (numel > 0 && elementwise::CanViewRange(x) && IsContiguous(x.shape(), out_shape, step)) {
      call.SetOutput(0, elementwise::ViewRange(x, base, std::move(out_shape)));
      return;
    }
    elementwise::StridedCopyToOutput(call, 0, x, numel > 0 ? base : 0, out_shape, strides);
  }

 private:
  // Trailing dimensions complete, then one dimension sliced with step 1, then only
  // dimensions of output size 1: the result is one block of the input.
  static bool IsContiguous(const Shape& in, const Shape& out, const std::vector<int64_t>& step) {
    size_t d = in.size();
    while (d > 0 && out[d - 1] == in[d - 1] && (step[d - 1] == 1 || in[d - 1] <= 1)) --d;
    if (d == 0) return true;
    --d;  // the partially sliced dimension
    if (out[d] > 1 && step[d] != 1) return false;
    for (size_t k = 0; k < d; ++k)
      if (out[k] != 1) return false;
    return true;
  }

  std::vector<int64_t> starts_, ends_;
  std::optional<std::vector<int64_t>> axes_;
};

using Slice1 = SliceKernel<false>;
using Slice10 = SliceKernel<true>;
OL_KERNEL_FACTORY(Slice1)
OL_KERNEL_FACTORY(Slice10)

}  // namespace onnx_light::ops
