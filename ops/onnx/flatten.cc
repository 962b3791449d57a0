// Flatten: a 2-D view [prod(dims[:axis]), prod(dims[axis:])] of the input's bytes (no copy).
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Flatten final : public core::runtime::KernelBase {
 public:
  explicit Flatten(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 1);
  }

  // A strided view stays a view when the new shape allows it (else one dense copy).
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const int64_t rank = x.rank();
    if (axis_ < -rank || axis_ > rank)
      call.Fail("axis " + std::to_string(axis_) + " is out of range for input of shape " +
                core::runtime::ShapeToString(x.shape()));
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? outer : inner) *= x.shape()[static_cast<size_t>(d)];
    call.SetOutput(0, x.ReshapedOrCopy({outer, inner}, call.allocator()));
  }

 private:
  int64_t axis_ = 1;
};

OL_KERNEL_FACTORY(Flatten)

}  // namespace onnx_light::ops
