#include "core/persistent_bindings.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/proto_desc.h"
#include "core/type_compat.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

namespace {

// Names a graph binds at its own level: inputs and every initializer category.
bool DeclaresName(const GraphProto& graph, const std::string& name) {
  for (const auto& v : graph.input())
    if (v.name() == name) return true;
  for (const auto& t : graph.initializer())
    if (t.name() == name) return true;
  for (const auto& s : graph.sparse_initializer())
    if (s.values().name() == name) return true;
  for (const auto& e : graph.encoded_initializer())
    if (e.name() == name) return true;
  for (const auto& p : graph.paged_cache_initializer())
    if (p.name() == name) return true;
  return false;
}

int CountCaptures(const GraphProto& graph, const std::string& name);

// Uses of `name` by the nodes and outputs of `graph`, where `name` is visible on entry.
int CountInBody(const GraphProto& graph, const std::string& name) {
  int uses = 0;
  for (const auto& node : graph.node()) {
    for (const auto& in : node.input())
      if (in == name) ++uses;
    ForEachSubgraph(
        node, [&](const AttributeProto&, const GraphProto& g) { uses += CountCaptures(g, name); });
    // A redefinition (invalid SSA, rejected by CheckModel) hides the name from then on.
    for (const auto& out : node.output())
      if (out == name) return uses;
  }
  for (const auto& out : graph.output())
    if (out.name() == name) ++uses;
  return uses;
}

int CountCaptures(const GraphProto& graph, const std::string& name) {
  if (DeclaresName(graph, name)) return 0;  // shadowed by the nested graph's own value
  return CountInBody(graph, name);
}

// ---- persistent binding types ----------------------------------------------------------

void CheckTypeAt(const TypeProto& type, const ModelProto* model, const std::string& what,
                 int depth) {
  OL_CHECK(depth < kMaxTypeDepth, ErrorCode::kInvalidModel,
           what + ": type nesting is too deep (cyclic struct references?)");
  switch (type.value_case()) {
    case TypeProto::kTensorType: {
      const int32_t elem = type.tensor_type().elem_type();
      OL_CHECK(elem != TensorProto::UNDEFINED, ErrorCode::kInvalidModel,
               what + ": tensor type has no element type");
      OL_CHECK(elem != TensorProto::STRING, ErrorCode::kInvalidModel,
               what + ": string tensors cannot be persistent");
      return;
    }
    case TypeProto::kSequenceType:
      OL_CHECK(type.sequence_type().has_elem_type(), ErrorCode::kInvalidModel,
               what + ": sequence type has no element type");
      CheckTypeAt(type.sequence_type().elem_type(), model, what + "[]", depth + 1);
      return;
    case TypeProto::kStructType: {
      const StructTypeProto& s = ResolveStruct(type.struct_type(), model, what);
      std::unordered_set<std::string> names;
      for (const auto& field : s.field()) {
        OL_CHECK(names.insert(field.name()).second, ErrorCode::kInvalidModel,
                 what + ": struct declares field " + Quote(field.name()) + " twice");
        OL_CHECK(field.has_type(), ErrorCode::kInvalidModel,
                 what + "." + field.name() + ": struct field has no type");
        CheckTypeAt(field.type(), model, what + "." + field.name(), depth + 1);
      }
      return;
    }
    case TypeProto::kMapType:
      Throw(ErrorCode::kInvalidModel, what + ": map values cannot be persistent (unsupported)");
    case TypeProto::kOptionalType:
      Throw(ErrorCode::kInvalidModel,
            what + ": optional values cannot be persistent (unsupported)");
    case TypeProto::kSparseTensorType:
      Throw(ErrorCode::kInvalidModel, what + ": sparse tensors cannot be persistent (unsupported)");
    case TypeProto::kOpaqueType:
      Throw(ErrorCode::kInvalidModel, what + ": opaque values cannot be persistent (unsupported)");
    case TypeProto::VALUE_NOT_SET:
      Throw(ErrorCode::kInvalidModel, what + ": the declaration has no type");
  }
}

void RejectNestedBindings(const GraphProto& graph, const std::string& where) {
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto& node = graph.node(i);
    ForEachSubgraph(node, [&](const AttributeProto& attr, const GraphProto& g) {
      const std::string sub = where + " > " + NodeDesc(node, i) + " attribute " +
                              Quote(attr.name()) + " > " + GraphDesc(g);
      OL_CHECK(g.persistent_bindings_size() == 0, ErrorCode::kInvalidModel,
               sub + ": persistent bindings are only allowed in the root graph (binding " +
                   Quote(g.persistent_bindings(0).input_name()) + " <- " +
                   Quote(g.persistent_bindings(0).output_name()) + ")");
      RejectNestedBindings(g, sub);
    });
  }
}

}  // namespace

int CountValueUses(const GraphProto& graph, const std::string& name) {
  return CountInBody(graph, name);
}

std::vector<ResolvedBinding> ResolvePersistentBindings(const GraphProto& graph,
                                                       const ModelProto* model) {
  RejectNestedBindings(graph, GraphDesc(graph));
  std::vector<ResolvedBinding> resolved;

  std::unordered_map<std::string, const ValueInfoProto*> inputs, outputs;
  for (const auto& v : graph.input()) inputs.emplace(v.name(), &v);
  for (const auto& v : graph.output()) outputs.emplace(v.name(), &v);
  std::unordered_set<std::string> bound_inputs, bound_outputs;

  for (int i = 0; i < graph.persistent_bindings_size(); ++i) {
    const auto& b = graph.persistent_bindings(i);
    const std::string what = GraphDesc(graph) + ": persistent binding " + std::to_string(i) +
                             " (input " + Quote(b.input_name()) + " <- output " +
                             Quote(b.output_name()) + ")";
    auto in = inputs.find(b.input_name());
    OL_CHECK(in != inputs.end(), ErrorCode::kInvalidModel,
             what + ": unknown input name " + Quote(b.input_name()) + " (not a graph input)");
    auto out = outputs.find(b.output_name());
    OL_CHECK(out != outputs.end(), ErrorCode::kInvalidModel,
             what + ": unknown output name " + Quote(b.output_name()) + " (not a graph output)");
    OL_CHECK(bound_inputs.insert(b.input_name()).second, ErrorCode::kInvalidModel,
             what + ": duplicate binding input name " + Quote(b.input_name()));
    OL_CHECK(bound_outputs.insert(b.output_name()).second, ErrorCode::kInvalidModel,
             what + ": duplicate binding output name " + Quote(b.output_name()));

    const int uses = CountValueUses(graph, b.input_name());
    OL_CHECK(uses == 1, ErrorCode::kInvalidModel,
             what + ": bound input " + Quote(b.input_name()) +
                 " must have exactly one value-use, found " + std::to_string(uses));

    OL_CHECK(in->second->has_type(), ErrorCode::kInvalidModel,
             what + ": input " + Quote(b.input_name()) + " has no declared type");
    OL_CHECK(out->second->has_type(), ErrorCode::kInvalidModel,
             what + ": output " + Quote(b.output_name()) + " has no declared type");
    CheckPersistentType(in->second->type(), model, what + ": input " + Quote(b.input_name()));
    CheckPersistentType(out->second->type(), model, what + ": output " + Quote(b.output_name()));
    const std::string why =
        TypeIncompatibility(in->second->type(), out->second->type(), model, what);
    OL_CHECK(why.empty(), ErrorCode::kInvalidModel,
             why + " (input and output types are incompatible)");
    resolved.push_back(ResolvedBinding{b.input_name(), b.output_name(), in->second, out->second});
  }
  return resolved;
}

void CheckPersistentType(const TypeProto& type, const ModelProto* model, const std::string& what) {
  CheckTypeAt(type, model, what, 0);
}

}  // namespace onnx_light::core
