// Unsqueeze: a view with size-1 dimensions inserted at `axes` (positions in the output,
// negative counting from its end). Opset 1-12 take `axes` as an attribute, 13+ as input.
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

template <bool kAxesInput>
class UnsqueezeKernel final : public core::runtime::KernelBase {
 public:
  explicit UnsqueezeKernel(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    if (!kAxesInput) axes_ = core::runtime::AttrInts(node, "axes");
  }

  // A strided view stays a view when the new shape allows it (else one dense copy).
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const std::vector<int64_t> axes =
        kAxesInput ? elementwise::ReadInt64s(call, call.input(1), "axes") : axes_;
    const int64_t out_rank = x.rank() + static_cast<int64_t>(axes.size());
    std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
    for (int64_t a : axes) {
      const int64_t axis = elementwise::NormalizeAxis(call, a, out_rank);
      if (inserted[static_cast<size_t>(axis)]) call.Fail("axes repeat axis " + std::to_string(a));
      inserted[static_cast<size_t>(axis)] = true;
    }
    core::runtime::Shape shape;
    size_t next = 0;
    for (int64_t d = 0; d < out_rank; ++d)
      shape.push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape()[next++]);
    call.SetOutput(0, x.ReshapedOrCopy(std::move(shape), call.allocator()));
  }

 private:
  std::vector<int64_t> axes_;
};

using Unsqueeze1 = UnsqueezeKernel<false>;
using Unsqueeze13 = UnsqueezeKernel<true>;
OL_KERNEL_FACTORY(Unsqueeze1)
OL_KERNEL_FACTORY(Unsqueeze13)

}  // namespace onnx_light::ops
