// How error messages name model elements (and one walk over the subgraphs of a node): "node 3
// (ai.rt::PagedAttention 'attn')", "graph 'main'", quoted names. Shared by the checker and type
// inference so both read alike.
#pragma once

#include <string>

#include "onnx_light.pb.h"

namespace onnx_light::core {

inline std::string Quote(const std::string& s) { return "'" + s + "'"; }

// "node 3 (Add 'add_1')" or "node 3 (Add)" when the node has no name.
inline std::string NodeDesc(const NodeProto& node, int index) {
  std::string op = node.domain().empty() || node.domain() == "ai.onnx"
                       ? node.op_type()
                       : node.domain() + "::" + node.op_type();
  std::string s = "node " + std::to_string(index) + " (" + op;
  if (!node.name().empty()) s += " " + Quote(node.name());
  return s + ")";
}

inline std::string GraphDesc(const GraphProto& graph) {
  return graph.name().empty() ? std::string("graph") : "graph " + Quote(graph.name());
}

// Calls fn(attribute, graph) for every graph a node's attributes hold (g and graphs).
template <typename Fn>
void ForEachSubgraph(const NodeProto& node, Fn&& fn) {
  for (const auto& attr : node.attribute()) {
    if (attr.has_g()) fn(attr, attr.g());
    for (const auto& g : attr.graphs()) fn(attr, g);
  }
}

}  // namespace onnx_light::core
