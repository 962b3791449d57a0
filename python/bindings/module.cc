// The extension module onnx_light.onnx_py._onnxpykernels. Each bindings/*.cc file adds one
// part through its Register* function, called here in dependency order.
#include <pybind11/pybind11.h>

#include "python/bindings/registration.h"

PYBIND11_MODULE(_onnxpykernels, m) {
  m.doc() = "onnx-light native runtime";
  auto runtime = m.def_submodule("runtime", "sessions, persistent state, generation");
  onnx_light::python::RegisterErrors(m);
  onnx_light::python::RegisterProto(m);
  onnx_light::python::RegisterParser(m);
  onnx_light::python::RegisterTensor(runtime);
  onnx_light::python::RegisterSession(runtime);
  onnx_light::python::RegisterState(runtime);
  onnx_light::python::RegisterKernelList(runtime);
  onnx_light::python::RegisterGeneration(runtime);
  onnx_light::python::RegisterScheduler(runtime);
  onnx_light::python::RegisterPaged(runtime);
  onnx_light::python::RegisterGraphBuilder(runtime);
  onnx_light::python::RegisterSchema(runtime);
  onnx_light::python::RegisterBatchRows(runtime);
}
