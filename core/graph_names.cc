#include "core/graph_names.h"

#include "onnx_light.pb.h"

namespace onnx_light::core {
namespace {

// Names used in `graph` (node inputs, outputs) that it does not declare: its captures.
void AddCaptures(const GraphProto& graph, std::unordered_set<std::string>& out) {
  const std::unordered_set<std::string> declared = DeclaredNames(graph);
  for (const auto& node : graph.node())
    for (const auto& name : NodeReads(node))
      if (!declared.count(name)) out.insert(name);
  for (const auto& v : graph.output())
    if (!declared.count(v.name())) out.insert(v.name());
}

void RenameIn(google::protobuf::RepeatedPtrField<std::string>& names, const std::string& from,
              const std::string& to) {
  for (auto& n : names)
    if (n == from) n = to;
}

// The name field of each initializer category, for rename and erase.
template <typename Fn>
bool VisitInitializers(GraphProto& graph, const std::string& name, Fn&& fn) {
  auto visit = [&](auto* field, auto name_of) {
    for (int i = 0; i < field->size(); ++i) {
      if (name_of(*field->Mutable(i)) != name) continue;
      fn(field, i, name_of(*field->Mutable(i)));
      return true;
    }
    return false;
  };
  auto plain = [](auto& m) -> std::string& { return *m.mutable_name(); };
  return visit(graph.mutable_initializer(), plain) ||
         visit(graph.mutable_sparse_initializer(),
               [](SparseTensorProto& s) -> std::string& {
                 return *s.mutable_values()->mutable_name();
               }) ||
         visit(graph.mutable_encoded_initializer(), plain) ||
         visit(graph.mutable_paged_cache_initializer(), plain);
}

}  // namespace

int FindValueInfo(const google::protobuf::RepeatedPtrField<ValueInfoProto>& values,
                  const std::string& name) {
  for (int i = 0; i < values.size(); ++i)
    if (values.Get(i).name() == name) return i;
  return -1;
}

std::unordered_set<std::string> DeclaredNames(const GraphProto& graph) {
  std::unordered_set<std::string> names;
  for (const auto& v : graph.input()) names.insert(v.name());
  for (const auto& t : graph.initializer()) names.insert(t.name());
  for (const auto& s : graph.sparse_initializer()) names.insert(s.values().name());
  for (const auto& e : graph.encoded_initializer()) names.insert(e.name());
  for (const auto& p : graph.paged_cache_initializer()) names.insert(p.name());
  for (const auto& n : graph.node())
    for (const auto& o : n.output()) names.insert(o);
  return names;
}

std::unordered_set<std::string> CollectValueNames(const GraphProto& graph) {
  std::unordered_set<std::string> names = DeclaredNames(graph);
  for (const auto& v : graph.output()) names.insert(v.name());
  for (const auto& v : graph.value_info()) names.insert(v.name());
  for (const auto& node : graph.node()) {
    for (const auto& in : node.input()) names.insert(in);
    for (const auto& attr : node.attribute()) {
      if (attr.has_g()) names.merge(CollectValueNames(attr.g()));
      for (const auto& g : attr.graphs()) names.merge(CollectValueNames(g));
    }
  }
  names.erase("");
  return names;
}

std::unordered_set<std::string> NodeReads(const NodeProto& node) {
  std::unordered_set<std::string> reads;
  for (const auto& in : node.input())
    if (!in.empty()) reads.insert(in);
  for (const auto& attr : node.attribute()) {
    if (attr.has_g()) AddCaptures(attr.g(), reads);
    for (const auto& g : attr.graphs()) AddCaptures(g, reads);
  }
  return reads;
}

void RenameUses(GraphProto& graph, const std::string& from, const std::string& to) {
  for (auto& node : *graph.mutable_node()) {
    RenameIn(*node.mutable_input(), from, to);
    for (auto& attr : *node.mutable_attribute()) {
      auto nested = [&](GraphProto& g) {
        if (!DeclaredNames(g).count(from)) RenameUses(g, from, to);
      };
      if (attr.has_g()) nested(*attr.mutable_g());
      for (auto& g : *attr.mutable_graphs()) nested(g);
    }
  }
  for (auto& v : *graph.mutable_output())
    if (v.name() == from) v.set_name(to);
  for (auto& v : *graph.mutable_value_info())
    if (v.name() == from) v.set_name(to);
}

const char* InitializerCategory(const GraphProto& graph, const std::string& name) {
  for (const auto& t : graph.initializer())
    if (t.name() == name) return "initializer";
  for (const auto& t : graph.sparse_initializer())
    if (t.values().name() == name) return "sparse_initializer";
  for (const auto& t : graph.encoded_initializer())
    if (t.name() == name) return "encoded_initializer";
  for (const auto& t : graph.paged_cache_initializer())
    if (t.name() == name) return "paged_cache_initializer";
  return nullptr;
}

bool RenameInitializer(GraphProto& graph, const std::string& from, const std::string& to) {
  return VisitInitializers(graph, from, [&](auto*, int, std::string& n) { n = to; });
}

bool EraseInitializer(GraphProto& graph, const std::string& name) {
  return VisitInitializers(graph, name,
                           [](auto* field, int i, std::string&) { field->DeleteSubrange(i, 1); });
}

void ForEachGraph(GraphProto& graph, const std::function<void(GraphProto&)>& fn) {
  fn(graph);
  for (auto& node : *graph.mutable_node()) {
    for (auto& attr : *node.mutable_attribute()) {
      if (attr.has_g()) ForEachGraph(*attr.mutable_g(), fn);
      for (auto& g : *attr.mutable_graphs()) ForEachGraph(g, fn);
    }
  }
}

}  // namespace onnx_light::core
