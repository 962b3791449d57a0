// Value names of a graph and of its nested graphs (If/Loop/Scan bodies capture outer values):
// the shared helpers of GraphBuilder (core/graph_builder.h) and the legacy graph edits
// (core/graph_edits.h).
#pragma once

#include <functional>
#include <string>
#include <unordered_set>

#include "onnx_light.pb.h"

namespace onnx_light::core {

// Index of the entry named `name` in a list of inputs, outputs or value_info, or -1.
int FindValueInfo(const google::protobuf::RepeatedPtrField<ValueInfoProto>& values,
                  const std::string& name);

// Names `graph` declares at its own level: inputs, initializers of every category, node outputs.
std::unordered_set<std::string> DeclaredNames(const GraphProto& graph);

// Every value name `graph` mentions (inputs, outputs, initializers of every category, node
// inputs and outputs, value_info), recursively through nested graphs.
std::unordered_set<std::string> CollectValueNames(const GraphProto& graph);

// The names `node` reads: its non-empty inputs and the outer values its nested graphs capture.
std::unordered_set<std::string> NodeReads(const NodeProto& node);

// Replaces every use of `from` by `to`: node inputs, graph outputs and value_info of `graph`,
// and the same inside nested graphs that do not declare `from` themselves (shadowing).
// Declarations of `graph` itself (inputs, initializers, node outputs) are the caller's.
void RenameUses(GraphProto& graph, const std::string& from, const std::string& to);

// The field holding the initializer named `name` ("initializer", "sparse_initializer",
// "encoded_initializer", "paged_cache_initializer"), or null when there is none.
const char* InitializerCategory(const GraphProto& graph, const std::string& name);
// Renames the initializer of any category named `from` (declaration only); false if none.
bool RenameInitializer(GraphProto& graph, const std::string& from, const std::string& to);
// Removes the initializer of any category named `name`; false if none.
bool EraseInitializer(GraphProto& graph, const std::string& name);

// Calls `fn` on `graph` and on every nested graph, outermost first.
void ForEachGraph(GraphProto& graph, const std::function<void(GraphProto&)>& fn);

}  // namespace onnx_light::core
