// Tile: repeats the input repeats[d] times along each dimension d. Viewing the output as
// [r0, d0, r1, d1, ...] makes it one strided copy with stride 0 along each r.
#include "core/checked_math.h"
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Tile final : public core::runtime::KernelBase {
 public:
  explicit Tile(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const std::vector<int64_t> repeats = elementwise::ReadInt64s(call, call.input(1), "repeats");
    if (static_cast<int64_t>(repeats.size()) != x.rank())
      call.Fail("repeats has " + std::to_string(repeats.size()) + " values for input of shape " +
                core::runtime::ShapeToString(x.shape()));
    const std::vector<int64_t> in_strides = core::runtime::DenseStrides(x.shape());
    core::runtime::Shape split_shape, out_shape;
    std::vector<int64_t> strides;
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] < 0) call.Fail("repeats must not be negative");
      split_shape.push_back(repeats[d]);
      split_shape.push_back(x.shape()[d]);
      strides.push_back(0);
      strides.push_back(in_strides[d]);
      out_shape.push_back(core::CheckedMul(repeats[d], x.shape()[d], "Tile's output dimension"));
    }
    elementwise::DispatchByWidth(call, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      auto& out = call.AllocateOutput(0, x.dtype(), out_shape);
      elementwise::StridedCopy(src, 0, split_shape, strides, out.template mutable_data<T>());
    });
  }
};

OL_KERNEL_FACTORY(Tile)

}  // namespace onnx_light::ops
