// The `reduction` attribute of ScatterND / ScatterElements and the copy-then-update driver
// they share: the output starts as a copy of data, then each update is combined in order.
#pragma once

#include <algorithm>
#include <string>

#include "ops/elementwise/copy.h"

namespace onnx_light::ops::elementwise {

enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };

// Parses `reduction` (none/add/mul from opset 16, max/min from 18), else kInvalidModel.
ScatterReduction ParseScatterReduction(const NodeProto& node, int64_t opset);

template <typename C>
inline C Reduce(ScatterReduction r, C a, C b) {
  switch (r) {
    case ScatterReduction::kAdd:
      return static_cast<C>(a + b);
    case ScatterReduction::kMul:
      return static_cast<C>(a * b);
    case ScatterReduction::kMax:
      return std::max(a, b);
    case ScatterReduction::kMin:
      return std::min(a, b);
    case ScatterReduction::kNone:
      break;
  }
  return b;
}

// Copies `data` into output 0 and calls apply(dst, updates) with typed pointers; plain
// assignment works for every dtype, reductions for numeric and BOOL types.
template <typename F>
void ScatterInto(KernelCall& call, const Tensor& data, const Tensor& updates,
                 ScatterReduction reduction, F&& apply) {
  if (updates.dtype() != data.dtype())
    call.Fail("updates must have the data's type, got " + core::DataTypeName(updates.dtype()) +
              " and " + core::DataTypeName(data.dtype()));
  auto run = [&](auto tag, auto combine) {
    using T = typename decltype(tag)::type;
    const T* src = data.data<T>();
    Tensor& out = call.AllocateOutput(0, data.dtype(), data.shape());
    T* dst = out.template mutable_data<T>();
    CopyElements(src, data.numel(), dst);
    apply(dst, updates.data<T>(), combine);
  };
  if (reduction == ScatterReduction::kNone) {
    DispatchByWidth(call, data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      run(tag, [](T& d, const T& u) { d = u; });
    });
    return;
  }
  DispatchType<kNumericTypes>(call, data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(tag, [reduction](T& d, const T& u) { d = Store<T>(Reduce(reduction, Load(d), Load(u))); });
  });
}

}  // namespace onnx_light::ops::elementwise
