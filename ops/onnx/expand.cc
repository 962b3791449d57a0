// Expand: broadcasts the input against `shape` (numpy rules in both directions: a 1 in
// `shape` keeps the input's dimension) with one strided copy.
#include "ops/elementwise/broadcast.h"
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Expand final : public core::runtime::KernelBase {
 public:
  explicit Expand(const core::runtime::KernelContext&) {}

  // One strided copy either way: a strided view (append-capacity cache) is read in place.
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const auto& shape_t = call.input(1);
    if (shape_t.rank() != 1)
      call.Fail("shape must be 1-D, got shape " + core::runtime::ShapeToString(shape_t.shape()));
    const core::runtime::Shape target = elementwise::ReadInt64s(call, shape_t, "shape");
    for (int64_t d : target)
      if (d < 0)
        call.Fail("shape " + core::runtime::ShapeToString(target) + " has a negative dimension");
    const core::runtime::Shape shapes[] = {x.shape(), target};
    const core::runtime::Shape out_shape =
        elementwise::BroadcastShapes(call, shapes,
                                     "input of shape " + core::runtime::ShapeToString(x.shape()) +
                                         " to shape " + core::runtime::ShapeToString(target));
    const std::vector<int64_t> in_strides = x.strides();
    std::vector<int64_t> strides(out_shape.size(), 0);
    const size_t lead = out_shape.size() - x.shape().size();
    for (size_t d = 0; d < x.shape().size(); ++d)
      strides[lead + d] = x.shape()[d] == 1 ? 0 : in_strides[d];
    elementwise::StridedCopyToOutput(call, 0, x, 0, out_shape, strides);
  }
};

OL_KERNEL_FACTORY(Expand)

}  // namespace onnx_light::ops
