// Kernels over one or more inputs of one type, folded pairwise with broadcasting (Max, Min).
#pragma once

#include "ops/elementwise/loops.h"

namespace onnx_light::ops::elementwise {

template <typename Op, TypeSet kAllowed>
class VariadicKernel : public core::runtime::KernelBase {
 public:
  explicit VariadicKernel(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override {
    std::vector<const Tensor*> inputs;
    for (size_t i = 0; i < call.input_count(); ++i)
      if (call.has_input(i)) inputs.push_back(&call.input(i));
    if (inputs.empty()) call.Fail("needs at least one input");
    const Tensor& first = *inputs[0];
    for (const Tensor* t : inputs)
      if (t->dtype() != first.dtype())
        call.Fail("inputs must have one type, got " + core::DataTypeName(first.dtype()) + " and " +
                  core::DataTypeName(t->dtype()));
    DispatchType<kAllowed>(call, first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (inputs.size() == 1) {
        call.SetOutput(0, first.BorrowView());
        return;
      }
      // Broadcast every shape first so that a mismatch names all inputs at once.
      std::vector<Shape> shapes;
      for (const Tensor* t : inputs) shapes.push_back(t->shape());
      BroadcastShapes(call, shapes);
      Tensor acc = ComputeBinary<T, T, T>(call, *inputs[0], *inputs[1], first.dtype(), Op{});
      for (size_t i = 2; i < inputs.size(); ++i)
        acc = ComputeBinary<T, T, T>(call, acc, *inputs[i], first.dtype(), Op{});
      call.SetOutput(0, std::move(acc));
    });
  }
};

}  // namespace onnx_light::ops::elementwise
