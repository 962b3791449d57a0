// Model validation: the ONNX structural rules the runtime relies on, plus the persistent
// binding rules of the spec ("Persistent input/output feedback"). Every failure throws
// Error(kInvalidModel) whose message names the graph, node (op type + name or index),
// value or binding at fault.
#pragma once

#include <string>

namespace onnx_light {
class GraphProto;
class ModelProto;
}  // namespace onnx_light

namespace onnx_light::core {

// Checks, recursively through subgraphs and model-local functions:
//  - ir_version is present; node domains are imported in opset_import (or name a local
//    function); local functions resolve and are not recursive;
//  - every node input is a graph input, an initializer (any category), an earlier node
//    output or (inside a subgraph) an outer-scope value; graph outputs are produced;
//  - each value is defined once (SSA); attribute fields agree with their declared type;
//  - persistent bindings (root graph only) satisfy CheckPersistentBindings;
//  - nodes with a LightOpSchema (core/op_schema.h, e.g. ai.rt::PagedAttention) satisfy it:
//    input/output counts, attributes, and the type rules wherever the input types are
//    known (CheckSchemaNodes, core/type_inference.h).
void CheckModel(const ModelProto& model);

// The spec's binding rules for `graph` (a root graph): names exist, no duplicates, each
// bound input has exactly one value-use (CountValueUses), bindings do not appear in nested
// graphs, and bound types are supported (no strings, maps, optionals, sparse or opaque
// values, also when nested) and compatible between input and output. `model` resolves
// StructTypeProto.type_ref references; without it only identical references match.
// A graph without bindings passes (ordinary sharing semantics).
void CheckPersistentBindings(const GraphProto& graph, const ModelProto* model = nullptr);

// Static value-uses of `name` in `graph`: every node input position, every graph output
// that returns it directly, and every capture inside nested graph attributes (all branches,
// recursively), except where a nested graph declares its own input/initializer of that
// name (shadowing). Declarations, bindings and value_info are not uses.
int CountValueUses(const GraphProto& graph, const std::string& name);

}  // namespace onnx_light::core
