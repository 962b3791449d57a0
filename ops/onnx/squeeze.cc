// Squeeze: a view without the listed size-1 dimensions (all of them when no axes are
// given). Opset 1-12 take `axes` as an attribute, opset 13+ as an optional input.
#include <algorithm>

#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

template <bool kAxesInput>
class SqueezeKernel final : public core::runtime::KernelBase {
 public:
  explicit SqueezeKernel(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    if (!kAxesInput) axes_ = core::runtime::OptionalAttrInts(node, "axes");
  }

  // A strided view stays a view when the new shape allows it (else one dense copy).
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const int64_t rank = x.rank();
    std::optional<std::vector<int64_t>> axes = axes_;
    if (kAxesInput && call.has_input(1))
      axes = elementwise::ReadInt64s(call, call.input(1), "axes");
    std::vector<bool> drop(static_cast<size_t>(rank), false);
    if (axes) {
      for (int64_t a : *axes) {
        const int64_t axis = elementwise::NormalizeAxis(call, a, rank);
        if (x.shape()[static_cast<size_t>(axis)] != 1)
          call.Fail("cannot squeeze axis " + std::to_string(a) + " of input with shape " +
                    core::runtime::ShapeToString(x.shape()) + ": its size is not 1");
        drop[static_cast<size_t>(axis)] = true;
      }
    } else {
      for (int64_t d = 0; d < rank; ++d)
        drop[static_cast<size_t>(d)] = x.shape()[static_cast<size_t>(d)] == 1;
    }
    core::runtime::Shape shape;
    for (int64_t d = 0; d < rank; ++d)
      if (!drop[static_cast<size_t>(d)]) shape.push_back(x.shape()[static_cast<size_t>(d)]);
    call.SetOutput(0, x.ReshapedOrCopy(std::move(shape), call.allocator()));
  }

 private:
  std::optional<std::vector<int64_t>> axes_;
};

using Squeeze1 = SqueezeKernel<false>;
using Squeeze13 = SqueezeKernel<true>;
OL_KERNEL_FACTORY(Squeeze1)
OL_KERNEL_FACTORY(Squeeze13)

}  // namespace onnx_light::ops
