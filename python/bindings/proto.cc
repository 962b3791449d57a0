#include "python/bindings/registration.h"

namespace onnx_light::python {
void RegisterProto(py::module_& m) { (void)m; }
}  // namespace onnx_light::python
