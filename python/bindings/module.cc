// The extension module onnx_light.onnx_py._onnxpykernels. Each bindings/*.cc file adds one
// part through a Register* function called here.
#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_onnxpykernels, m) {
  m.doc() = "onnx-light native runtime";
  m.def_submodule("runtime", "onnx-light runtime: sessions, persistent state, generation");
}
