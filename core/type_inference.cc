#include "core/type_inference.h"

#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/checker.h"
#include "core/error.h"
#include "core/op_schema.h"
#include "core/proto_desc.h"
#include "core/type_compat.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

namespace {

using OpsetMap = std::unordered_map<std::string, int64_t>;
using TypeMap = std::unordered_map<std::string, const TypeProto*>;

std::string NormalDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

// An inferred type for a value the graph that produces it does not declare.
struct Inference {
  const GraphProto* graph;
  std::string name;
  TypeProto type;
};

// Walks graphs in order with a scope stack of known types. The model passed CheckModel's
// structural checks, so inputs are visible and values are defined once.
class SchemaWalker {
 public:
  explicit SchemaWalker(const ModelProto& model) : model_(model) {
    for (const auto& op : model.opset_import()) opsets_[NormalDomain(op.domain())] = op.version();
  }

  std::vector<Inference> Run() {
    for (const auto& f : model_.functions()) WalkFunction(f);
    WalkGraph(model_.graph(), opsets_, GraphDesc(model_.graph()));
    return std::move(inferences_);
  }

 private:
  const TypeProto* Own(TypeProto type) { return &owned_.emplace_back(std::move(type)); }

  const TypeProto* Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return nullptr;
  }

  const TypeProto* TensorType(int32_t elem, const google::protobuf::RepeatedField<int64_t>& dims) {
    TypeProto t;
    t.mutable_tensor_type()->set_elem_type(elem);
    auto* shape = t.mutable_tensor_type()->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    return Own(std::move(t));
  }

  // Graph inputs and initializers (an input's declaration wins over its default).
  void DeclareGraphValues(const GraphProto& g, TypeMap& scope) {
    // An untyped input is unknown, and still shadows an outer value of the same name.
    for (const auto& v : g.input()) scope.emplace(v.name(), v.has_type() ? &v.type() : nullptr);
    for (const auto& t : g.initializer())
      scope.emplace(t.name(), TensorType(t.data_type(), t.dims()));
    for (const auto& e : g.encoded_initializer())
      if (e.has_logical_type()) scope.emplace(e.name(), &e.logical_type());
    for (const auto& p : g.paged_cache_initializer()) {
      TypeProto cache;  // a layout-less struct: the paged-cache declaration
      cache.mutable_struct_type()->set_name(p.name());
      scope.emplace(p.name(), Own(std::move(cache)));
    }
  }

  void WalkGraph(const GraphProto& g, const OpsetMap& opsets, const std::string& path) {
    TypeMap declared;  // declarations of values nodes produce
    for (const auto& v : g.value_info())
      if (v.has_type()) declared.emplace(v.name(), &v.type());
    for (const auto& v : g.output())
      if (v.has_type()) declared.emplace(v.name(), &v.type());
    scopes_.emplace_back();
    DeclareGraphValues(g, scopes_.back());
    for (int i = 0; i < g.node_size(); ++i) WalkNode(g.node(i), i, &g, opsets, declared, path);
    scopes_.pop_back();
  }

  void WalkFunction(const FunctionProto& f) {
    OpsetMap opsets = opsets_;
    for (const auto& op : f.opset_import()) opsets[NormalDomain(op.domain())] = op.version();
    TypeMap declared;
    for (const auto& v : f.value_info())
      if (v.has_type()) declared.emplace(v.name(), &v.type());
    scopes_.emplace_back();
    const std::string path = "function " + Quote(f.domain() + "::" + f.name());
    for (int i = 0; i < f.node_size(); ++i) WalkNode(f.node(i), i, nullptr, opsets, declared, path);
    scopes_.pop_back();
  }

  // `graph` is null inside a function body (nothing is recorded there).
  void WalkNode(const NodeProto& node, int index, const GraphProto* graph, const OpsetMap& opsets,
                const TypeMap& declared, const std::string& path) {
    const std::string desc = path + ": " + NodeDesc(node, index);
    for (const auto& attr : node.attribute()) {
      const std::string sub =
          path + " > " + NodeDesc(node, index) + " attribute " + Quote(attr.name()) + " > ";
      if (attr.has_g()) WalkGraph(attr.g(), opsets, sub + GraphDesc(attr.g()));
      for (const auto& g : attr.graphs()) WalkGraph(g, opsets, sub + GraphDesc(g));
    }
    const LightOpSchema* schema = nullptr;
    auto opset = opsets.find(NormalDomain(node.domain()));
    if (opset != opsets.end())
      schema = LightSchemaRegistry::Get(node.domain(), node.op_type(), opset->second);

    std::map<int, TypeProto> inferred;
    if (schema != nullptr) {
      std::vector<const TypeProto*> inputs;
      for (const auto& in : node.input()) inputs.push_back(in.empty() ? nullptr : Lookup(in));
      InferenceContext ctx(node, std::move(inputs), &model_, desc);
      schema->Verify(ctx);
      for (int k = 0; k < node.output_size(); ++k) {
        auto d = declared.find(node.output(k));
        if (!node.output(k).empty() && d != declared.end())
          schema->VerifyOutputDeclaration(ctx, k, *d->second);
      }
      inferred = ctx.output_types();
    }
    for (int k = 0; k < node.output_size(); ++k) {
      const std::string& name = node.output(k);
      if (name.empty()) continue;
      auto d = declared.find(name);
      auto t = inferred.find(k);
      if (d != declared.end()) {
        scopes_.back()[name] = d->second;
        if (t != inferred.end()) CheckDeclaration(desc, *schema, k, name, t->second, *d->second);
      } else if (t != inferred.end()) {
        scopes_.back()[name] = Own(t->second);
        if (graph != nullptr) inferences_.push_back({graph, name, t->second});
      } else {
        scopes_.back()[name] = nullptr;  // unknown
      }
    }
  }

  void CheckDeclaration(const std::string& desc, const LightOpSchema& schema, int k,
                        const std::string& name, const TypeProto& inferred,
                        const TypeProto& declared) {
    const std::string what = "output " + std::to_string(k) + " " + Quote(name) + " (" +
                             schema.outputs()[static_cast<size_t>(k)].name + ")";
    const std::string why = TypeIncompatibility(inferred, declared, &model_, what);
    OL_CHECK(why.empty(), ErrorCode::kInvalidModel,
             desc + ": " + why + " (inferred vs declared type)");
  }

  const ModelProto& model_;
  OpsetMap opsets_;
  std::vector<TypeMap> scopes_;  // innermost last
  std::deque<TypeProto> owned_;  // types built here; a deque keeps their addresses
  std::vector<Inference> inferences_;
};

// Sets the type of `name` where `graph` lists it without one, or adds a value_info entry.
void Record(GraphProto& graph, const std::string& name, const TypeProto& type) {
  for (auto* list : {graph.mutable_output(), graph.mutable_value_info()}) {
    for (auto& v : *list) {
      if (v.name() != name || v.has_type()) continue;
      *v.mutable_type() = type;
      return;
    }
  }
  auto* v = graph.add_value_info();
  v->set_name(name);
  *v->mutable_type() = type;
}

}  // namespace

void CheckSchemaNodes(const ModelProto& model) { SchemaWalker(model).Run(); }

void InferTypes(ModelProto& model) {
  CheckModel(model);
  for (const Inference& inference : SchemaWalker(model).Run()) {
    // The walker reads the model as const; every graph it names belongs to `model`.
    Record(const_cast<GraphProto&>(*inference.graph), inference.name, inference.type);
  }
}

}  // namespace onnx_light::core
