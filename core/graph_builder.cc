#include "core/graph_builder.h"

#include <memory>
#include <utility>
#include <vector>

#include "core/checker.h"
#include "core/graph_names.h"
#include "core/paged_cache.h"
#include "core/runtime_value.h"
#include "core/standard_onnx.h"

namespace onnx_light::core {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string BindingDesc(const PersistentBindingProto& b) {
  return "persistent binding " + Quote(b.input_name()) + " <- " + Quote(b.output_name());
}

std::string NodeDesc(const NodeProto& node, int index) {
  return "node " + std::to_string(index) + " (" + node.op_type() +
         (node.name().empty() ? "" : " " + Quote(node.name())) + ")";
}

// Who reads `name` in the root graph: nodes (also through nested captures), graph outputs and
// bindings, described for an error message; `skip` is a node index not to count.
std::vector<std::string> Readers(const GraphProto& g, const std::string& name, int skip = -1) {
  std::vector<std::string> out;
  for (int i = 0; i < g.node_size(); ++i)
    if (i != skip && NodeReads(g.node(i)).count(name)) out.push_back(NodeDesc(g.node(i), i));
  if (FindValueInfo(g.output(), name) >= 0) out.push_back("graph output " + Quote(name));
  for (const auto& b : g.persistent_bindings())
    if (b.input_name() == name || b.output_name() == name) out.push_back(BindingDesc(b));
  return out;
}

// Removing a bound input or output would leave its binding dangling.
void RefuseBound(const GraphProto& g, const std::string& op, const std::string& name) {
  for (const auto& b : g.persistent_bindings())
    OL_CHECK(b.input_name() != name && b.output_name() != name, ErrorCode::kInvalidArgument,
             op + " " + Quote(name) + ": it is bound by " + BindingDesc(b) +
                 " (remove the binding first)");
}

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

void RequireName(const std::string& op, const std::string& name) {
  OL_CHECK(!name.empty(), ErrorCode::kInvalidArgument, op + ": the name is empty");
}

// `name` must not already be used anywhere in the graph (values, initializers, nested graphs).
void RequireNewName(const GraphProto& g, const std::string& op, const std::string& name) {
  RequireName(op, name);
  OL_CHECK(!CollectValueNames(g).count(name), ErrorCode::kInvalidArgument,
           op + ": " + Quote(name) + " is already a value name of the graph");
}

void RequireNotNodeOutput(const GraphProto& g, const std::string& op, const std::string& name) {
  for (const auto& n : g.node())
    for (const auto& o : n.output())
      OL_CHECK(o != name, ErrorCode::kInvalidArgument,
               op + ": " + Quote(name) + " is already a node output");
}

void RequireNewInitializer(const GraphProto& g, const std::string& op, const std::string& name) {
  RequireName(op, name);
  const char* category = InitializerCategory(g, name);
  OL_CHECK(category == nullptr, ErrorCode::kInvalidArgument,
           op + ": " + Quote(name) + " is already used by " + category +
               " (names are unique across all initializer categories)");
  RequireNotNodeOutput(g, op, name);
}

// The index of graph input/output `name` (`kind`), which must exist.
int RequireValue(const google::protobuf::RepeatedPtrField<ValueInfoProto>& values,
                 const std::string& op, const std::string& name, const char* kind) {
  const int index = FindValueInfo(values, name);
  OL_CHECK(index >= 0, ErrorCode::kInvalidArgument,
           op + ": " + Quote(name) + " is not a graph " + kind);
  return index;
}

// A non-owning handle: the runtime view lives only while the caller's reference does.
template <typename T>
std::shared_ptr<const T> Unowned(const T& value) {
  return std::shared_ptr<const T>(std::shared_ptr<const void>(), &value);
}

}  // namespace

void CheckPagedCacheInitializer(const PagedCacheProto& cache, const ModelProto& model,
                                ErrorCode code) {
  using runtime::RuntimeValue;
  const std::string what = "paged_cache_initializer";
  OL_CHECK(!cache.name().empty(), code, "a " + what + " has no name");
  const auto catalogue = runtime::ParameterCatalogue::FromModel(Unowned(model));
  RuntimeValue value;
  try {
    value = RuntimeValue::FromPagedCache(Unowned(cache), catalogue);
  } catch (const Error& e) {
    Throw(code, what + " " + Quote(cache.name()) + ": " + e.what());
  }
  auto check_reference = [&](const std::string& path, const RuntimeValue& page) {
    if (!page.is_encoded() || page.encoded().parameter_ref().empty()) return;
    OL_CHECK(catalogue->entries.count(page.encoded().parameter_ref()), code,
             what + " " + Quote(path) + ": parameter_ref " + Quote(page.encoded().parameter_ref()) +
                 " names no ModelProto.shared_parameters entry");
  };
  try {
    runtime::CheckPagedCachePages(what, cache.name(), value, check_reference);
  } catch (const Error& e) {
    Throw(code, e.what());
  }
}

GraphBuilder GraphBuilder::Import(const ModelProto& model) { return Import(ModelProto(model)); }

GraphBuilder GraphBuilder::Import(ModelProto&& model) {
  GraphBuilder builder;
  builder.model_ = std::move(model);
  builder.Validate("Import");
  return builder;
}

void GraphBuilder::Validate(const char* when) const {
  try {
    CheckModel(model_);
    for (const auto& cache : model_.graph().paged_cache_initializer())
      CheckPagedCacheInitializer(cache, model_, ErrorCode::kInvalidModel);
  } catch (const Error& e) {
    Throw(e.code(), std::string("GraphBuilder::") + when + ": " + e.what());
  }
}

ModelProto GraphBuilder::Export() const {
  Validate("Export");
  return model_;
}

std::string GraphBuilder::ExportStandardOnnx() const {
  Validate("ExportStandardOnnx");
  return core::ExportStandardOnnx(model_);
}

void GraphBuilder::RenameInput(const std::string& from, const std::string& to) {
  GraphProto& g = *model_.mutable_graph();
  RequireValue(g.input(), "RenameInput", from, "input");
  RenameValue(from, to, "RenameInput");
}

void GraphBuilder::RenameOutput(const std::string& from, const std::string& to) {
  GraphProto& g = *model_.mutable_graph();
  RequireValue(g.output(), "RenameOutput", from, "output");
  RenameValue(from, to, "RenameOutput");
}

// The declarations (input, initializer default, producing node output), then every use,
// binding and value_info entry.
void GraphBuilder::RenameValue(const std::string& from, const std::string& to,
                               const std::string& op) {
  GraphProto& g = *model_.mutable_graph();
  RequireNewName(g, op, to);
  const int input = FindValueInfo(g.input(), from);
  if (input >= 0) g.mutable_input(input)->set_name(to);
  RenameInitializer(g, from, to);
  for (auto& node : *g.mutable_node())
    for (auto& out : *node.mutable_output())
      if (out == from) out = to;
  RenameUses(g, from, to);
  for (auto& b : *g.mutable_persistent_bindings()) {
    if (b.input_name() == from) b.set_input_name(to);
    if (b.output_name() == from) b.set_output_name(to);
  }
}

void GraphBuilder::AddNode(NodeProto node) {
  GraphProto& g = *model_.mutable_graph();
  const std::string op = "AddNode " + Quote(node.name());
  const auto declared = DeclaredNames(g);
  for (const auto& out : node.output())
    OL_CHECK(out.empty() || !declared.count(out), ErrorCode::kInvalidArgument,
             op + ": output " + Quote(out) + " is already defined in the graph");
  int position = g.node_size();  // before the first node reading one of its outputs
  for (int i = g.node_size() - 1; i >= 0; --i) {
    OL_CHECK(node.name().empty() || g.node(i).name() != node.name(), ErrorCode::kInvalidArgument,
             op + ": a node of that name already exists");
    const auto reads = NodeReads(g.node(i));
    for (const auto& out : node.output())
      if (!out.empty() && reads.count(out)) position = i;
  }
  *g.add_node() = std::move(node);
  for (int i = g.node_size() - 1; i > position; --i) g.mutable_node()->SwapElements(i, i - 1);
}

void GraphBuilder::RemoveNode(const std::string& name) {
  GraphProto& g = *model_.mutable_graph();
  const std::string op = "RemoveNode " + Quote(name);
  RequireName("RemoveNode", name);
  int index = -1;
  for (int i = 0; i < g.node_size(); ++i) {
    if (g.node(i).name() != name) continue;
    OL_CHECK(index < 0, ErrorCode::kInvalidArgument, op + ": several nodes have that name");
    index = i;
  }
  OL_CHECK(index >= 0, ErrorCode::kInvalidArgument, op + ": no node has that name");
  for (const auto& out : g.node(index).output()) {
    if (out.empty()) continue;
    const auto readers = Readers(g, out, index);
    OL_CHECK(readers.empty(), ErrorCode::kInvalidArgument,
             op + ": its output " + Quote(out) + " is still used by " + Join(readers));
  }
  g.mutable_node()->DeleteSubrange(index, 1);
}

void GraphBuilder::AddInput(ValueInfoProto input) {
  GraphProto& g = *model_.mutable_graph();
  RequireName("AddInput", input.name());
  OL_CHECK(FindValueInfo(g.input(), input.name()) < 0, ErrorCode::kInvalidArgument,
           "AddInput: " + Quote(input.name()) + " is already a graph input");
  RequireNotNodeOutput(g, "AddInput", input.name());
  *g.add_input() = std::move(input);
}

void GraphBuilder::RemoveInput(const std::string& name) {
  GraphProto& g = *model_.mutable_graph();
  const int index = RequireValue(g.input(), "RemoveInput", name, "input");
  RefuseBound(g, "RemoveInput", name);
  const auto readers = Readers(g, name);
  OL_CHECK(readers.empty() || InitializerCategory(g, name) != nullptr, ErrorCode::kInvalidArgument,
           "RemoveInput " + Quote(name) + ": it is still used by " + Join(readers));
  g.mutable_input()->DeleteSubrange(index, 1);
}

void GraphBuilder::AddOutput(ValueInfoProto output) {
  GraphProto& g = *model_.mutable_graph();
  RequireName("AddOutput", output.name());
  OL_CHECK(FindValueInfo(g.output(), output.name()) < 0, ErrorCode::kInvalidArgument,
           "AddOutput: " + Quote(output.name()) + " is already a graph output");
  OL_CHECK(
      DeclaredNames(g).count(output.name()), ErrorCode::kInvalidArgument,
      "AddOutput: " + Quote(output.name()) + " is not produced by any node, input or initializer");
  *g.add_output() = std::move(output);
}

void GraphBuilder::RemoveOutput(const std::string& name) {
  GraphProto& g = *model_.mutable_graph();
  const int index = RequireValue(g.output(), "RemoveOutput", name, "output");
  RefuseBound(g, "RemoveOutput", name);
  g.mutable_output()->DeleteSubrange(index, 1);
}

void GraphBuilder::AddInitializer(TensorProto initializer) {
  GraphProto& g = *model_.mutable_graph();
  RequireNewInitializer(g, "AddInitializer", initializer.name());
  *g.add_initializer() = std::move(initializer);
}

void GraphBuilder::RemoveInitializer(const std::string& name) {
  GraphProto& g = *model_.mutable_graph();
  OL_CHECK(InitializerCategory(g, name) != nullptr, ErrorCode::kInvalidArgument,
           "RemoveInitializer: " + Quote(name) + " is not an initializer of any category");
  const auto readers = Readers(g, name);
  OL_CHECK(readers.empty() || FindValueInfo(g.input(), name) >= 0, ErrorCode::kInvalidArgument,
           "RemoveInitializer " + Quote(name) + ": it is still used by " + Join(readers));
  EraseInitializer(g, name);
}

void GraphBuilder::AddPersistentBinding(const std::string& input_name,
                                        const std::string& output_name) {
  GraphProto& g = *model_.mutable_graph();
  auto* binding = g.add_persistent_bindings();
  binding->set_input_name(input_name);
  binding->set_output_name(output_name);
  try {
    CheckPersistentBindings(g, &model_);
  } catch (const Error& e) {
    g.mutable_persistent_bindings()->RemoveLast();
    Throw(ErrorCode::kInvalidArgument, "AddPersistentBinding: " + std::string(e.what()));
  }
}

void GraphBuilder::RemovePersistentBinding(const std::string& input_name) {
  GraphProto& g = *model_.mutable_graph();
  for (int i = 0; i < g.persistent_bindings_size(); ++i) {
    if (g.persistent_bindings(i).input_name() != input_name) continue;
    g.mutable_persistent_bindings()->DeleteSubrange(i, 1);
    return;
  }
  Throw(ErrorCode::kInvalidArgument,
        "RemovePersistentBinding: no binding has input " + Quote(input_name));
}

void GraphBuilder::MakePagedCacheInitializer(const std::string& name, PagedCacheProto cache) {
  GraphProto& g = *model_.mutable_graph();
  RequireNewInitializer(g, "MakePagedCacheInitializer", name);
  cache.set_name(name);
  CheckPagedCacheInitializer(cache, model_, ErrorCode::kInvalidArgument);
  *g.add_paged_cache_initializer() = std::move(cache);
}

}  // namespace onnx_light::core
