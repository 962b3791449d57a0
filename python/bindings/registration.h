// One Register* function per bindings/*.cc file.
#pragma once

#include <pybind11/pybind11.h>

namespace onnx_light::python {
namespace py = pybind11;
void RegisterErrors(py::module_& m);         // errors.cc: Error -> ValueError/TypeError/...
void RegisterProto(py::module_& m);          // proto.cc: reflection wrappers of the proto messages
void RegisterParser(py::module_& m);         // parser.cc: text format parse/print, load/save
void RegisterTensor(py::module_& runtime);   // tensor.cc: Tensor, DLPack, NumPy
void RegisterSession(py::module_& runtime);  // session.cc: contexts, sessions, custom kernels
void RegisterState(py::module_& runtime);    // state.cc: PersistentValueState, TaskCompletion
void RegisterKernelList(py::module_& runtime);    // kernels.cc: runtime.builtin_kernels()
void RegisterGeneration(py::module_& runtime);    // generation.cc: GenerationOptions, generate
void RegisterScheduler(py::module_& runtime);     // scheduler.cc: RequestScheduler, RequestHandle
void RegisterPaged(py::module_& runtime);         // paged.cc: PagedFormat, paged-attention policies
void RegisterGraphBuilder(py::module_& runtime);  // graph_builder.cc: GraphBuilder, graph edits
void RegisterSchema(py::module_& runtime);        // schema.cc: get_schema, check_model, infer_types
void RegisterBatchRows(py::module_& runtime);     // batch_rows.cc: RowCaches, run_rows
}  // namespace onnx_light::python
