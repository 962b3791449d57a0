// runtime.builtin_kernels(): the (domain, op_type) pairs onnx-light has kernels for.
#include <pybind11/stl.h>

#include "executor/kernel_registry.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {

void RegisterKernelList(py::module_& runtime) {
  runtime.def(
      "builtin_kernels", [] { return core::runtime::BuiltinKernels().List(); },
      "Sorted (domain, op_type) pairs of the built-in kernels ('' is the ONNX domain).");
}

}  // namespace onnx_light::python
