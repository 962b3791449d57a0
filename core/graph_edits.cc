#include "core/graph_edits.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/checker.h"
#include "core/error.h"
#include "core/graph_names.h"

namespace onnx_light::core {
namespace {

using Names = std::unordered_set<std::string>;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// What a legacy edit would lose: refused, naming it (spec "Serialized cache values").
void RejectPersistence(const ModelProto& model, const std::string& op) {
  const GraphProto& g = model.graph();
  const std::string advice = "; use GraphBuilder for supported graph edits";
  for (const auto& cache : g.paged_cache_initializer())
    Throw(ErrorCode::kInvalidModel, op + " cannot preserve paged_cache_initializer " +
                                        Quote(cache.name()) + " of graph " + Quote(g.name()) +
                                        " and refuses to drop it" + advice);
  for (const auto& b : g.persistent_bindings())
    Throw(ErrorCode::kInvalidModel, op + " cannot preserve persistent binding " +
                                        Quote(b.input_name()) + " <- " + Quote(b.output_name()) +
                                        " of graph " + Quote(g.name()) + " and refuses to drop it" +
                                        advice);
}

// The model without its graph (copying it and clearing the graph would copy the weights).
ModelProto Shell(const ModelProto& m) {
  ModelProto s;
  if (m.has_ir_version()) s.set_ir_version(m.ir_version());
  if (m.has_producer_name()) s.set_producer_name(m.producer_name());
  if (m.has_producer_version()) s.set_producer_version(m.producer_version());
  if (m.has_domain()) s.set_domain(m.domain());
  if (m.has_model_version()) s.set_model_version(m.model_version());
  if (m.has_doc_string()) s.set_doc_string(m.doc_string());
  *s.mutable_opset_import() = m.opset_import();
  *s.mutable_metadata_props() = m.metadata_props();
  *s.mutable_training_info() = m.training_info();
  *s.mutable_functions() = m.functions();
  *s.mutable_configuration() = m.configuration();
  *s.mutable_struct_types() = m.struct_types();
  *s.mutable_shared_parameters() = m.shared_parameters();
  return s;
}

const ValueInfoProto* FindInfo(const GraphProto& g, const std::string& name) {
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
    for (const auto& v : *list)
      if (v.name() == name) return &v;
  return nullptr;
}

ValueInfoProto InfoOrName(const GraphProto& g, const std::string& name) {
  const ValueInfoProto* info = FindInfo(g, name);
  ValueInfoProto out;
  if (info != nullptr) out = *info;
  out.set_name(name);
  return out;
}

// Marks the nodes `outputs` need (walking back from them, stopping at `inputs`); returns the
// values they read.
Names MarkNeeded(const GraphProto& g, const Names& inputs, const std::vector<std::string>& outputs,
                 std::vector<bool>& keep) {
  Names needed;
  for (const auto& o : outputs)
    if (!inputs.count(o)) needed.insert(o);
  for (int i = g.node_size() - 1; i >= 0; --i) {
    const NodeProto& node = g.node(i);
    const bool used = std::any_of(node.output().begin(), node.output().end(),
                                  [&](const std::string& o) { return needed.count(o) > 0; });
    if (!used) continue;
    keep[static_cast<size_t>(i)] = true;
    for (const auto& r : NodeReads(node))
      if (!inputs.count(r)) needed.insert(r);
  }
  return needed;
}

template <typename Field, typename NameOf>
void CopyNeeded(const Field& from, Field* to, const Names& needed, NameOf name_of) {
  for (const auto& item : from)
    if (needed.count(name_of(item))) *to->Add() = item;
}

void CopyInitializers(const GraphProto& from, GraphProto& to, const Names& needed) {
  auto plain = [](const auto& m) -> const std::string& { return m.name(); };
  CopyNeeded(from.initializer(), to.mutable_initializer(), needed, plain);
  CopyNeeded(from.sparse_initializer(), to.mutable_sparse_initializer(), needed,
             [](const SparseTensorProto& s) -> const std::string& { return s.values().name(); });
  CopyNeeded(from.encoded_initializer(), to.mutable_encoded_initializer(), needed, plain);
}

void Prefix(std::string& name, const std::string& prefix) {
  if (!name.empty()) name = prefix + name;
}

void PrefixGraph(GraphProto& g, const std::string& prefix) {
  for (auto* list : {g.mutable_input(), g.mutable_output(), g.mutable_value_info()})
    for (auto& v : *list) Prefix(*v.mutable_name(), prefix);
  for (auto& t : *g.mutable_initializer()) Prefix(*t.mutable_name(), prefix);
  for (auto& s : *g.mutable_sparse_initializer())
    Prefix(*s.mutable_values()->mutable_name(), prefix);
  for (auto& e : *g.mutable_encoded_initializer()) Prefix(*e.mutable_name(), prefix);
  for (auto& node : *g.mutable_node()) {
    Prefix(*node.mutable_name(), prefix);
    for (auto& in : *node.mutable_input()) Prefix(in, prefix);
    for (auto& out : *node.mutable_output()) Prefix(out, prefix);
  }
}

// Names of `second` (after connection) that `first` also uses, other than the connected ones.
void RejectCollisions(const GraphProto& first, const GraphProto& second, const Names& sources) {
  const Names mine = CollectValueNames(first);
  std::vector<std::string> shared;
  for (const auto& name : CollectValueNames(second))
    if (mine.count(name) && !sources.count(name)) shared.push_back(name);
  if (shared.empty()) return;
  std::sort(shared.begin(), shared.end());
  std::string list;
  for (size_t i = 0; i < shared.size() && i < 8; ++i) list += (i ? ", " : "") + Quote(shared[i]);
  Throw(ErrorCode::kInvalidArgument, "MergeModels: both models use the value names " + list +
                                         (shared.size() > 8 ? ", ..." : "") +
                                         " (AddPrefix one of them first)");
}

void AppendGraph(GraphProto& into, GraphProto&& from) {
  for (auto& v : *from.mutable_input()) *into.add_input() = std::move(v);
  for (auto& v : *from.mutable_output()) *into.add_output() = std::move(v);
  for (auto& v : *from.mutable_value_info()) *into.add_value_info() = std::move(v);
  for (auto& t : *from.mutable_initializer()) *into.add_initializer() = std::move(t);
  for (auto& t : *from.mutable_sparse_initializer()) *into.add_sparse_initializer() = std::move(t);
  for (auto& t : *from.mutable_encoded_initializer())
    *into.add_encoded_initializer() = std::move(t);
  for (auto& n : *from.mutable_node()) *into.add_node() = std::move(n);
}

void MergeOpsets(ModelProto& into, const ModelProto& other) {
  std::unordered_map<std::string, int64_t> versions;
  for (const auto& op : into.opset_import()) versions[op.domain()] = op.version();
  for (const auto& op : other.opset_import()) {
    auto it = versions.find(op.domain());
    if (it == versions.end()) {
      *into.add_opset_import() = op;
      continue;
    }
    OL_CHECK(it->second == op.version(), ErrorCode::kInvalidArgument,
             "MergeModels: the models import domain " + Quote(op.domain()) +
                 " at different versions (" + std::to_string(it->second) + " and " +
                 std::to_string(op.version()) + ")");
  }
  into.set_ir_version(std::max(into.ir_version(), other.ir_version()));
}

void MergeFunctions(ModelProto& into, const ModelProto& other) {
  std::unordered_set<std::string> keys;
  auto key = [](const FunctionProto& f) {
    return f.domain() + "::" + f.name() + ":" + f.overload();
  };
  for (const auto& f : into.functions()) keys.insert(key(f));
  for (const auto& f : other.functions())
    if (keys.insert(key(f)).second) *into.add_functions() = f;
}

}  // namespace

ModelProto ExtractModel(const ModelProto& model, const std::vector<std::string>& input_names,
                        const std::vector<std::string>& output_names) {
  RejectPersistence(model, "ExtractModel");
  CheckModel(model);
  const GraphProto& g = model.graph();
  const Names inputs(input_names.begin(), input_names.end());
  const Names known = CollectValueNames(g);
  for (const auto* list : {&input_names, &output_names})
    for (const auto& name : *list)
      OL_CHECK(known.count(name), ErrorCode::kInvalidArgument,
               "ExtractModel: " + Quote(name) + " is not a value of graph " + Quote(g.name()));
  std::vector<bool> keep(static_cast<size_t>(g.node_size()), false);
  const Names needed = MarkNeeded(g, inputs, output_names, keep);
  for (const auto& v : g.input())
    OL_CHECK(!needed.count(v.name()) || InitializerCategory(g, v.name()) != nullptr,
             ErrorCode::kInvalidArgument,
             "ExtractModel: the outputs depend on graph input " + Quote(v.name()) +
                 ", which is not among the extracted inputs");
  ModelProto out = Shell(model);
  GraphProto& r = *out.mutable_graph();
  r.set_name(g.name());
  for (const auto& name : input_names) *r.add_input() = InfoOrName(g, name);
  for (const auto& name : output_names) *r.add_output() = InfoOrName(g, name);
  CopyInitializers(g, r, needed);
  for (int i = 0; i < g.node_size(); ++i)
    if (keep[static_cast<size_t>(i)]) *r.add_node() = g.node(i);
  CopyNeeded(g.value_info(), r.mutable_value_info(), needed,
             [](const ValueInfoProto& v) -> const std::string& { return v.name(); });
  CheckModel(out);
  return out;
}

ModelProto AddPrefix(const ModelProto& model, const std::string& prefix) {
  RejectPersistence(model, "AddPrefix");
  CheckModel(model);
  ModelProto out = model;
  ForEachGraph(*out.mutable_graph(), [&](GraphProto& g) { PrefixGraph(g, prefix); });
  CheckModel(out);
  return out;
}

ModelProto MergeModels(const ModelProto& first, const ModelProto& second,
                       const std::vector<std::pair<std::string, std::string>>& io_map) {
  RejectPersistence(first, "MergeModels (first model)");
  RejectPersistence(second, "MergeModels (second model)");
  CheckModel(first);
  CheckModel(second);
  ModelProto out = first;
  MergeOpsets(out, second);
  MergeFunctions(out, second);
  GraphProto& g = *out.mutable_graph();
  GraphProto g2 = second.graph();
  Names sources, targets;
  for (const auto& [from, to] : io_map) {
    OL_CHECK(FindValueInfo(g.output(), from) >= 0, ErrorCode::kInvalidArgument,
             "MergeModels: io_map source " + Quote(from) + " is not an output of the first model");
    const int input = FindValueInfo(g2.input(), to);
    OL_CHECK(input >= 0, ErrorCode::kInvalidArgument,
             "MergeModels: io_map target " + Quote(to) + " is not an input of the second model");
    g2.mutable_input()->DeleteSubrange(input, 1);
    EraseInitializer(g2, to);  // a default the connection replaces
    RenameUses(g2, to, from);
    sources.insert(from);
    targets.insert(to);
  }
  RejectCollisions(g, g2, sources);
  for (int i = g.output_size() - 1; i >= 0; --i)
    if (sources.count(g.output(i).name())) g.mutable_output()->DeleteSubrange(i, 1);
  AppendGraph(g, std::move(g2));
  CheckModel(out);
  return out;
}

}  // namespace onnx_light::core
