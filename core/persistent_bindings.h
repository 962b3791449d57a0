// The persistent-binding rules of the spec ("Persistent input/output feedback"), in one
// place: the checker, the graph plan and PersistentValueState all call
// ResolvePersistentBindings and keep no checks of their own. Every failure throws
// Error(kInvalidModel) naming the graph, the binding (index, input <- output) and the value.
#pragma once

#include <string>
#include <vector>

namespace onnx_light {
class GraphProto;
class ModelProto;
class TypeProto;
class ValueInfoProto;
}  // namespace onnx_light

namespace onnx_light::core {

// One checked binding: the graph input fed from the graph output on the next run.
struct ResolvedBinding {
  std::string input_name;
  std::string output_name;
  const ValueInfoProto* input = nullptr;   // the graph's declaration (points into the graph)
  const ValueInfoProto* output = nullptr;  // both have a type
};

// Checks `graph` (a root graph) and returns its bindings in declaration order: names exist,
// no duplicates, each bound input has exactly one value-use (CountValueUses), bindings do not
// appear in nested graphs, bound types are supported (CheckPersistentType) and compatible
// between input and output. `model` resolves StructTypeProto.type_ref references; without
// it only identical references match. A graph without bindings gives an empty list.
std::vector<ResolvedBinding> ResolvePersistentBindings(const GraphProto& graph,
                                                       const ModelProto* model = nullptr);

// The same rules, when only the verdict matters.
inline void CheckPersistentBindings(const GraphProto& graph, const ModelProto* model = nullptr) {
  (void)ResolvePersistentBindings(graph, model);
}

// Rejects what persistent state cannot hold, wherever it is nested: map, optional, sparse and
// opaque values, string or untyped tensors, untyped sequences, struct fields without a type or
// declared twice, unresolvable or cyclic struct references. `what` prefixes the message.
void CheckPersistentType(const TypeProto& type, const ModelProto* model, const std::string& what);

// Static value-uses of `name` in `graph`: every node input position, every graph output
// that returns it directly, and every capture inside nested graph attributes (all branches,
// recursively), except where a nested graph declares its own input/initializer of that
// name (shadowing). Declarations, bindings and value_info are not uses.
int CountValueUses(const GraphProto& graph, const std::string& name);

}  // namespace onnx_light::core
