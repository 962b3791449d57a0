// How many inputs and outputs each standard ONNX operator this runtime implements may take,
// per operator-set version (from the `onnx` package's schemas). Kernels read the inputs they
// know and would silently ignore extra ones, or read past missing ones, so a node with more
// or fewer inputs or outputs than its schema allows is refused when a session is built,
// naming the node; so is a graph attribute on an operator that takes none (its captures
// would become inputs the kernel reads as its own).
#pragma once

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core {

// Throws kInvalidModel for the first node (in the graph, its subgraphs and the model-local
// functions) of the default domain with more or fewer inputs or outputs than its schema at
// the imported opset version allows, or with a graph attribute it does not take. Operators
// not in the table are not checked.
void CheckNodeArity(const ModelProto& model);

}  // namespace onnx_light::core
