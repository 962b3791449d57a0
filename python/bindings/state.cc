#include "python/bindings/registration.h"

namespace onnx_light::python {
void RegisterState(py::module_& runtime) { (void)runtime; }
}  // namespace onnx_light::python
