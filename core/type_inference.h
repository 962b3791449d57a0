// Schema checks and type/shape inference over a model (spec "Versioned operator schema"):
// every node whose (domain, op type, imported version) has a LightOpSchema
// (core/op_schema.h) is verified against the types its inputs are known to have: graph
// inputs, value_info, graph outputs, initializers and the outputs inferred for earlier
// nodes, through subgraphs (with their outer scope) and model-local functions. Nodes
// without a schema (standard ONNX operators, custom ai.rt kernels) are not checked and
// their outputs are known only where declared.
#pragma once

namespace onnx_light {
class ModelProto;
}  // namespace onnx_light

namespace onnx_light::core {

// The schema part of CheckModel (which calls it after its structural checks; the model must
// pass those first). Throws kInvalidModel naming the graph, node (op type + name) and the
// attribute, input or output at fault, also when an inferred output type contradicts the
// output's declaration.
void CheckSchemaNodes(const ModelProto& model);

// CheckModel, then records the inferred type of every output of a schema'd node that has no
// declaration yet: a graph output or value_info entry without a type gets it, otherwise a
// value_info entry is added to the graph (or subgraph) that produces the value. Existing
// declarations are kept unchanged. Outputs inside model-local functions are checked but not
// recorded. Idempotent.
void InferTypes(ModelProto& model);

}  // namespace onnx_light::core
