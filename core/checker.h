// Model validation: the ONNX structural rules the runtime relies on, plus the persistent
// binding rules of the spec ("Persistent input/output feedback"). Every failure throws
// Error(kInvalidModel) whose message names the graph, node (op type + name or index),
// value or binding at fault.
#pragma once

#include <string>

#include "core/persistent_bindings.h"  // CheckPersistentBindings, CountValueUses

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
//  - persistent bindings satisfy ResolvePersistentBindings (core/persistent_bindings.h);
//  - nodes with a LightOpSchema (core/op_schema.h, e.g. ai.rt::PagedAttention) satisfy it:
//    input/output counts, attributes, and the type rules wherever the input types are
//    known (CheckSchemaNodes, core/type_inference.h).
void CheckModel(const ModelProto& model);

}  // namespace onnx_light::core
