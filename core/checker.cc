#include "core/checker.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/proto_desc.h"
#include "core/type_compat.h"
#include "core/type_inference.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

namespace {

// ---- structural checks -----------------------------------------------------------------

using OpsetMap = std::unordered_map<std::string, int64_t>;

std::string NormalizeDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

std::string FunctionKey(const std::string& domain, const std::string& name,
                        const std::string& overload) {
  return domain + '\n' + name + '\n' + overload;
}

const char* AttributeTypeName(int type) {
  return AttributeProto::AttributeType_IsValid(type)
             ? AttributeProto::AttributeType_Name(static_cast<AttributeProto::AttributeType>(type))
                   .c_str()
             : "UNKNOWN";
}

class ModelChecker {
 public:
  explicit ModelChecker(const ModelProto& model) : model_(model) {}

  void Run() {
    Check(model_.has_ir_version() && model_.ir_version() > 0, "model has no ir_version");
    Check(model_.has_graph(), "model has no graph");
    for (const auto& op : model_.opset_import()) {
      const std::string domain = NormalizeDomain(op.domain());
      Check(opsets_.emplace(domain, op.version()).second,
            "opset_import lists domain " + Quote(op.domain()) + " twice");
    }
    // opset_import exists since IR version 3.
    Check(!opsets_.empty() || model_.ir_version() < 3, "model has no opset_import");
    for (const auto& f : model_.functions()) {
      Check(!f.name().empty(), "a model-local function has no name");
      Check(functions_.emplace(FunctionKey(f.domain(), f.name(), f.overload()), &f).second,
            "model-local function " + Quote(f.domain() + "::" + f.name()) + " is defined twice");
    }
    CheckFunctionRecursion();
    for (const auto& f : model_.functions()) CheckFunction(f);

    const GraphProto& graph = model_.graph();
    path_.push_back(GraphDesc(graph));
    scopes_.emplace_back();
    CheckGraph(graph, opsets_, nullptr);
    scopes_.pop_back();
    path_.pop_back();
    CheckPersistentBindings(graph, &model_);
    CheckSchemaNodes(model_);
  }

 private:
  void Check(bool cond, const std::string& message) {
    if (cond) return;
    std::string where;
    for (const auto& p : path_) where += (where.empty() ? "" : " > ") + p;
    Throw(ErrorCode::kInvalidModel, where.empty() ? message : where + ": " + message);
  }

  bool Visible(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (it->count(name)) return true;
    return false;
  }

  bool IsLocalFunction(const NodeProto& node) const {
    return functions_.count(FunctionKey(node.domain(), node.op_type(), node.overload())) > 0;
  }

  void CheckGraph(const GraphProto& graph, const OpsetMap& opsets, const FunctionProto* function) {
    auto& scope = scopes_.back();
    for (const auto& v : graph.input()) {
      Check(!v.name().empty(), "a graph input has no name");
      Check(scope.insert(v.name()).second,
            "graph input " + Quote(v.name()) + " is declared twice (SSA)");
    }
    // An initializer may also be declared as an input (a default), but names are unique
    // across all initializer categories.
    std::unordered_set<std::string> initializers;
    auto add_initializer = [&](const std::string& name, const char* kind) {
      Check(!name.empty(), std::string("a ") + kind + " has no name");
      Check(initializers.insert(name).second,
            std::string(kind) + " " + Quote(name) + " reuses an initializer name (SSA)");
      scope.insert(name);
    };
    for (const auto& t : graph.initializer()) {
      add_initializer(t.name(), "initializer");
      CheckTensor(t, "initializer " + Quote(t.name()));
    }
    for (const auto& s : graph.sparse_initializer()) {
      add_initializer(s.values().name(), "sparse initializer");
      CheckTensor(s.values(), "sparse initializer " + Quote(s.values().name()) + " values");
      CheckTensor(s.indices(), "sparse initializer " + Quote(s.values().name()) + " indices");
    }
    for (const auto& e : graph.encoded_initializer())
      add_initializer(e.name(), "encoded initializer");
    for (const auto& p : graph.paged_cache_initializer())
      add_initializer(p.name(), "paged cache initializer");

    for (int i = 0; i < graph.node_size(); ++i) CheckNode(graph.node(i), i, opsets, function);

    for (const auto& v : graph.output()) {
      Check(!v.name().empty(), "a graph output has no name");
      Check(Visible(v.name()), "graph output " + Quote(v.name()) +
                                   " is not produced by any node, input or initializer");
    }
  }

  void CheckNode(const NodeProto& node, int index, const OpsetMap& opsets,
                 const FunctionProto* function) {
    const std::string desc =
        node.op_type().empty() ? "node " + std::to_string(index) : NodeDesc(node, index);
    Check(!node.op_type().empty(), desc + " has no op_type");
    Check(IsLocalFunction(node) || opsets.count(NormalizeDomain(node.domain())) > 0 ||
              (function != nullptr && opsets_.count(NormalizeDomain(node.domain())) > 0),
          desc + ": domain " + Quote(node.domain()) +
              " is not imported in opset_import and names no model-local function");
    for (int k = 0; k < node.input_size(); ++k) {
      const std::string& in = node.input(k);
      if (in.empty()) continue;  // an omitted optional input
      Check(Visible(in), desc + ": input " + std::to_string(k) + " " + Quote(in) +
                             " is not a graph input, initializer, earlier node output or "
                             "outer-scope value (graph not topologically sorted?)");
    }
    std::unordered_set<std::string> attr_names;
    for (const auto& attr : node.attribute()) {
      Check(attr_names.insert(attr.name()).second,
            desc + ": attribute " + Quote(attr.name()) + " appears twice");
      CheckAttribute(attr, node, index, desc, opsets, function);
    }
    for (const auto& out : node.output()) {
      if (out.empty()) continue;  // an omitted optional output
      Check(!Visible(out),
            desc + ": output " + Quote(out) + " is already defined (graphs must be in SSA form)");
      scopes_.back().insert(out);
    }
  }

  void CheckAttribute(const AttributeProto& attr, const NodeProto& node, int index,
                      const std::string& desc, const OpsetMap& opsets,
                      const FunctionProto* function) {
    const std::string what = desc + " attribute " + Quote(attr.name());
    Check(!attr.name().empty(), desc + ": an attribute has no name");
    if (!attr.ref_attr_name().empty()) {
      Check(function != nullptr, what + " refers to function attribute " +
                                     Quote(attr.ref_attr_name()) + " outside a function body");
      bool declared = false;
      for (const auto& a : function->attribute()) declared |= a == attr.ref_attr_name();
      for (const auto& a : function->attribute_proto())
        declared |= a.name() == attr.ref_attr_name();
      Check(declared, what + " refers to " + Quote(attr.ref_attr_name()) +
                          ", which the function does not declare");
    }
    const int type = attr.type();
    Check(type == AttributeProto::UNDEFINED || AttributeProto::AttributeType_IsValid(type),
          what + " has unknown type " + std::to_string(type));
    // Which value fields are set, and which type each one implies.
    std::vector<std::pair<const char*, int>> used;
    if (attr.has_f()) used.emplace_back("f", AttributeProto::FLOAT);
    if (attr.has_i()) used.emplace_back("i", AttributeProto::INT);
    if (attr.has_s()) used.emplace_back("s", AttributeProto::STRING);
    if (attr.has_t()) used.emplace_back("t", AttributeProto::TENSOR);
    if (attr.has_g()) used.emplace_back("g", AttributeProto::GRAPH);
    if (attr.has_sparse_tensor()) used.emplace_back("sparse_tensor", AttributeProto::SPARSE_TENSOR);
    if (attr.has_tp()) used.emplace_back("tp", AttributeProto::TYPE_PROTO);
    if (attr.floats_size()) used.emplace_back("floats", AttributeProto::FLOATS);
    if (attr.ints_size()) used.emplace_back("ints", AttributeProto::INTS);
    if (attr.strings_size()) used.emplace_back("strings", AttributeProto::STRINGS);
    if (attr.tensors_size()) used.emplace_back("tensors", AttributeProto::TENSORS);
    if (attr.graphs_size()) used.emplace_back("graphs", AttributeProto::GRAPHS);
    if (attr.sparse_tensors_size())
      used.emplace_back("sparse_tensors", AttributeProto::SPARSE_TENSORS);
    if (attr.type_protos_size()) used.emplace_back("type_protos", AttributeProto::TYPE_PROTOS);
    Check(used.size() <= 1, what + " sets more than one value field ('" +
                                std::string(used.size() > 1 ? used[0].first : "") + "' and '" +
                                std::string(used.size() > 1 ? used[1].first : "") + "')");
    if (attr.ref_attr_name().empty())
      Check(type != AttributeProto::UNDEFINED, what + " has no type");
    if (!used.empty() && type != AttributeProto::UNDEFINED)
      Check(used[0].second == type, what + " has type " + AttributeTypeName(type) +
                                        " but sets field '" + used[0].first + "'");

    if (attr.has_t()) CheckTensor(attr.t(), what);
    for (const auto& t : attr.tensors()) CheckTensor(t, what);
    if (attr.has_sparse_tensor()) CheckTensor(attr.sparse_tensor().values(), what);
    for (const auto& s : attr.sparse_tensors()) CheckTensor(s.values(), what);
    auto subgraph = [&](const GraphProto& g) {
      path_.push_back(NodeDesc(node, index) + " attribute " + Quote(attr.name()) + " > " +
                      GraphDesc(g));
      Check(g.persistent_bindings_size() == 0,
            "persistent bindings are only allowed in the root graph, not in a subgraph");
      scopes_.emplace_back();
      // Nodes of a subgraph inside a function body still belong to that function.
      CheckGraph(g, opsets, function);
      scopes_.pop_back();
      path_.pop_back();
    };
    if (attr.has_g()) subgraph(attr.g());
    for (const auto& g : attr.graphs()) subgraph(g);
  }

  void CheckTensor(const TensorProto& t, const std::string& what) {
    const int32_t type = t.data_type();
    Check(type != TensorProto::UNDEFINED && TensorProto::DataType_IsValid(type),
          what + ": tensor has no or an unknown data type (" + std::to_string(type) + ")");
    int64_t numel = 1;
    for (int64_t d : t.dims()) {
      Check(d >= 0, what + ": tensor has a negative dimension");
      numel = d != 0 && numel > std::numeric_limits<int64_t>::max() / d ? -1 : numel * d;
      Check(numel >= 0, what + ": tensor element count overflows");
    }
    if (t.data_location() == TensorProto::EXTERNAL) {
      bool has_location = false;
      for (const auto& e : t.external_data()) has_location |= e.key() == "location";
      Check(has_location, what + ": external data has no 'location'");
      return;
    }
    if (t.has_raw_data()) {
      Check(type != TensorProto::STRING, what + ": STRING data cannot be stored in raw_data");
      if (IsKnownDataType(type)) {
        const size_t want = StorageBytes(static_cast<DataType>(type), numel);
        Check(t.raw_data().size() == want, what + ": raw_data has " +
                                               std::to_string(t.raw_data().size()) +
                                               " bytes, expected " + std::to_string(want));
      }
    }
  }

  // Body of a model-local function: its own scope (no outer scope), its own opsets.
  void CheckFunction(const FunctionProto& f) {
    path_.push_back("function " + Quote(f.domain() + "::" + f.name()));
    OpsetMap opsets = opsets_;
    for (const auto& op : f.opset_import()) opsets[NormalizeDomain(op.domain())] = op.version();
    std::vector<std::unordered_set<std::string>> saved;
    saved.swap(scopes_);
    scopes_.emplace_back();
    for (const auto& in : f.input()) {
      if (in.empty()) continue;
      Check(scopes_.back().insert(in).second, "input " + Quote(in) + " is declared twice");
    }
    for (int i = 0; i < f.node_size(); ++i) CheckNode(f.node(i), i, opsets, &f);
    for (const auto& out : f.output())
      Check(out.empty() || Visible(out), "output " + Quote(out) + " is not produced");
    scopes_.swap(saved);
    path_.pop_back();
  }

  void CollectCalls(const NodeProto& node, std::vector<const FunctionProto*>& calls) const {
    auto it = functions_.find(FunctionKey(node.domain(), node.op_type(), node.overload()));
    if (it != functions_.end()) calls.push_back(it->second);
    ForEachSubgraph(node, [&](const AttributeProto&, const GraphProto& g) {
      for (const auto& n : g.node()) CollectCalls(n, calls);
    });
  }

  void CheckFunctionRecursion() {
    std::unordered_map<const FunctionProto*, int> state;  // 1 visiting, 2 done
    std::vector<std::string> stack;
    std::function<void(const FunctionProto*)> visit = [&](const FunctionProto* f) {
      int& s = state[f];
      const std::string name = f->domain() + "::" + f->name();
      if (s == 2) return;
      if (s == 1) {
        std::string cycle;
        for (const auto& n : stack) cycle += n + " -> ";
        Check(false,
              "model-local function " + Quote(name) + " is recursive (" + cycle + name + ")");
      }
      s = 1;
      stack.push_back(name);
      std::vector<const FunctionProto*> calls;
      for (const auto& n : f->node()) CollectCalls(n, calls);
      for (const auto* c : calls) visit(c);
      stack.pop_back();
      state[f] = 2;
    };
    for (const auto& f : model_.functions()) visit(&f);
  }

  const ModelProto& model_;
  OpsetMap opsets_;
  std::unordered_map<std::string, const FunctionProto*> functions_;
  std::vector<std::unordered_set<std::string>> scopes_;  // innermost last
  std::vector<std::string> path_;                        // where we are, for messages
};

}  // namespace

void CheckModel(const ModelProto& model) { ModelChecker(model).Run(); }

}  // namespace onnx_light::core
