// ConstantOfShape: a tensor of the given shape filled with the one-element `value`
// attribute (default FLOAT 0).
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class ConstantOfShape final : public core::runtime::KernelBase {
 public:
  explicit ConstantOfShape(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    std::optional<core::runtime::Tensor> v = core::runtime::AttrTensor(node, "value");
    if (v) {
      OL_CHECK(v->numel() == 1, core::ErrorCode::kInvalidModel,
               core::runtime::NodeLabel(node) + ": value must have one element, got shape " +
                   core::runtime::ShapeToString(v->shape()));
      value_ = std::move(*v);
    } else {
      value_ = core::runtime::Tensor::FromFloat("", {1}, {0.f});
    }
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& shape_t = call.input(0);
    if (shape_t.rank() != 1)
      call.Fail("shape must be 1-D, got shape " + core::runtime::ShapeToString(shape_t.shape()));
    const core::runtime::Shape shape = elementwise::ReadInt64s(call, shape_t, "shape");
    for (int64_t d : shape)
      if (d < 0)
        call.Fail("shape " + core::runtime::ShapeToString(shape) + " has a negative dimension");
    elementwise::DispatchByWidth(
        call, value_.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T v = value_.data<T>()[0];
          auto& out = call.AllocateOutput(0, value_.dtype(), shape);
          T* p = out.template mutable_data<T>();
          std::fill(p, p + out.numel(), v);
        },
        "value");
  }

 private:
  core::runtime::Tensor value_;
};

OL_KERNEL_FACTORY(ConstantOfShape)

}  // namespace onnx_light::ops
