#include "ops/elementwise/loops.h"

#include "onnx_light.pb.h"

namespace onnx_light::ops::elementwise {

void CheckSameType(const KernelCall& call, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    call.Fail("inputs must have the same type, got " + core::DataTypeName(a.dtype()) + " ('" +
              call.node().input(0) + "') and " + core::DataTypeName(b.dtype()) + " ('" +
              call.node().input(1) + "')");
}

}  // namespace onnx_light::ops::elementwise
