// Split: cuts the input along `axis` into the node's outputs. Sizes come from the `split`
// attribute (opset 2-12) or input (13+), else from num_outputs (18+: ceil-sized parts, the
// last one smaller), else equal parts. When every part is one contiguous block (all
// dimensions before `axis` are 1) the outputs are views on the input's bytes.
#include "core/checked_math.h"
#include "ops/elementwise/copy.h"
#include "ops/elementwise/view.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

template <int kVersion>
class SplitKernel final : public core::runtime::KernelBase {
 public:
  explicit SplitKernel(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
    if (kVersion < 13) split_attr_ = core::runtime::OptionalAttrInts(node, "split");
    if (kVersion >= 18 && core::runtime::HasAttribute(node, "num_outputs"))
      num_outputs_ = core::runtime::AttrInt(node, "num_outputs", 0);
  }

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    if (rank == 0) call.Fail("cannot split a scalar");
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, rank);
    const int64_t dim = x.shape()[static_cast<size_t>(axis)];
    const int64_t outputs = static_cast<int64_t>(call.output_count());
    std::vector<int64_t> sizes;
    std::optional<std::vector<int64_t>> split = split_attr_;
    if (kVersion >= 13 && call.has_input(1))
      split = elementwise::ReadInt64s(call, call.input(1), "split");
    if (split) {
      if (num_outputs_) call.Fail("give either the split input or num_outputs, not both");
      sizes = *split;
      if (static_cast<int64_t>(sizes.size()) != outputs)
        call.Fail("split has " + std::to_string(sizes.size()) + " sizes for " +
                  std::to_string(outputs) + " outputs");
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0) call.Fail("split sizes must not be negative");
        total = core::CheckedAdd(total, s, "Split's sizes");
      }
      if (total != dim)
        call.Fail("split sizes add up to " + std::to_string(total) + " but axis " +
                  std::to_string(axis) + " of input shape " +
                  core::runtime::ShapeToString(x.shape()) + " has " + std::to_string(dim));
    } else if (num_outputs_) {
      const int64_t n = *num_outputs_;
      if (n < 1 || n != outputs)
        call.Fail("num_outputs is " + std::to_string(n) + " but the node has " +
                  std::to_string(outputs) + " outputs");
      // As the reference: parts of ceil(dim / n), the last one takes what is left.
      const int64_t chunk = dim % n == 0 ? dim / n : dim / n + 1;
      sizes.assign(static_cast<size_t>(n), chunk);
      sizes.back() += dim - chunk * n;
      if (sizes.back() < 0)
        call.Fail("cannot split axis " + std::to_string(axis) + " of size " + std::to_string(dim) +
                  " into " + std::to_string(n) + " parts");
    } else {
      if (outputs < 1 || dim % outputs != 0)
        call.Fail("cannot split axis " + std::to_string(axis) + " of size " + std::to_string(dim) +
                  " into " + std::to_string(outputs) + " equal parts");
      sizes.assign(static_cast<size_t>(outputs), dim / outputs);
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape()[static_cast<size_t>(d)];
    const std::vector<int64_t> strides = core::runtime::DenseStrides(x.shape());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Shape shape = x.shape();
      shape[static_cast<size_t>(axis)] = sizes[i];
      if (call.output_wanted(i)) {
        if (outer == 1 && elementwise::CanViewRange(x)) {
          call.SetOutput(i, elementwise::ViewRange(x, start * inner, std::move(shape)));
        } else {
          elementwise::StridedCopyToOutput(call, i, x, start * inner, shape, strides);
        }
      }
      start += sizes[i];
    }
  }

 private:
  int64_t axis_ = 0;
  std::optional<std::vector<int64_t>> split_attr_;
  std::optional<int64_t> num_outputs_;
};

using Split2 = SplitKernel<2>;
using Split13 = SplitKernel<13>;
using Split18 = SplitKernel<18>;
OL_KERNEL_FACTORY(Split2)
OL_KERNEL_FACTORY(Split13)
OL_KERNEL_FACTORY(Split18)

}  // namespace onnx_light::ops
