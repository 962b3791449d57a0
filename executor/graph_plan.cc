#include "executor/graph_plan.h"

#include <algorithm>
#include <chrono>
#include <queue>
#include <unordered_set>

#include "core/fault_injection.h"
#include "core/model_io.h"
#include "core/persistent_bindings.h"
#include "core/tensor_proto.h"
#include "core/type_compat.h"
#include "executor/attributes.h"
#include "executor/function_kernel.h"
#include "executor/fusion.h"
#include "executor/kernel_registry.h"
#include "executor/node_profile.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

thread_local const PlanBuildScope* current_scope = nullptr;

// Makes `scope` current while a plan's kernels are created (nested builds restore the
// enclosing one).
class ScopeGuard {
 public:
  explicit ScopeGuard(const PlanBuildScope* scope) : previous_(current_scope) {
    current_scope = scope;
  }
  ~ScopeGuard() { current_scope = previous_; }

 private:
  const PlanBuildScope* previous_;
};

std::string NormalDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

std::string DomainLabel(const std::string& domain) {
  return domain.empty() ? std::string("ai.onnx") : domain;
}

void CollectFree(const GraphProto& graph, std::vector<std::string>& out,
                 std::unordered_set<std::string>& seen) {
  std::unordered_set<std::string> defined;
  for (const auto& v : graph.input()) defined.insert(v.name());
  for (const auto& t : graph.initializer()) defined.insert(t.name());
  for (const auto& e : graph.encoded_initializer()) defined.insert(e.name());
  for (const auto& c : graph.paged_cache_initializer()) defined.insert(c.name());
  for (const auto& s : graph.sparse_initializer()) defined.insert(s.values().name());
  for (const auto& n : graph.node())
    for (const auto& o : n.output())
      if (!o.empty()) defined.insert(o);
  auto use = [&](const std::string& name) {
    if (name.empty() || defined.count(name) || seen.count(name)) return;
    seen.insert(name);
    out.push_back(name);
  };
  for (const auto& n : graph.node()) {
    for (const auto& i : n.input()) use(i);
    for (const auto& name : ImplicitInputs(n)) use(name);
  }
  for (const auto& o : graph.output()) use(o.name());
}

constexpr const char* kFusedDomain = "ai.onnx_light.fused";

// The kernel of `proto`: the context's custom kernels, then model-local functions, then
// built-ins. `builtin_only`: null unless a built-in kernel serves it.
std::unique_ptr<KernelBase> MakeNodeKernel(const NodeProto& proto, RuntimeContext& context,
                                           const PlanBuildScope& scope, bool builtin_only = false) {
  const std::string domain = NormalDomain(proto.domain());
  // Fused nodes (executor/fusion.h) come from the plan, not the model's imports.
  const int64_t opset = domain == kFusedDomain ? 1 : scope.opsets.opset(domain);
  int64_t since_version = 0;
  const KernelFactory* factory = context.custom_kernels().Find(
      domain, proto.op_type(), opset, symbolic::Device::kCPU, &since_version);
  const FunctionProto* function =
      factory ? nullptr : FindModelFunction(scope.model, domain, proto.op_type());
  if (builtin_only && (factory != nullptr || function != nullptr)) return nullptr;
  if (function != nullptr) return MakeFunctionKernel(proto, *function, context, scope);
  if (factory == nullptr)
    factory = BuiltinKernels().Find(domain, proto.op_type(), opset, symbolic::Device::kCPU,
                                    &since_version);
  if (builtin_only && factory == nullptr) return nullptr;
  OL_CHECK(factory != nullptr, ErrorCode::kNotImplemented,
           "no kernel for " + DomainLabel(domain) + "::" + proto.op_type() + " (opset " +
               std::to_string(opset) + ") needed by node '" + proto.name() + "'");
  // The kernel sees the opsets in force here (the model's, a function's), not the caller's.
  std::unique_ptr<KernelBase> kernel =
      (*factory)(proto, context, KernelInfo(proto, scope.opsets, since_version));
  OL_CHECK(kernel != nullptr, ErrorCode::kInvalidModel,
           "the kernel factory for " + DomainLabel(domain) + "::" + proto.op_type() +
               " returned no kernel for node '" + proto.name() + "'");
  return kernel;
}

// Ops whose result depends on more than their inputs: never folded.

bool Deterministic(const NodeProto& proto) {
  static const std::unordered_set<std::string> random = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
      "Multinomial",  "Bernoulli",        "Dropout"};
  if (random.count(proto.op_type())) return false;
  for (const auto& a : proto.attribute())
    if (a.has_g() || a.graphs_size() > 0) return false;  // control flow
  return true;
}

}  // namespace

const PlanBuildScope* CurrentPlanBuildScope() { return current_scope; }

std::vector<std::string> FreeNames(const GraphProto& graph) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  CollectFree(graph, out, seen);
  return out;
}

std::vector<std::string> ImplicitInputs(const NodeProto& node) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (const auto& a : node.attribute()) {
    std::vector<const GraphProto*> graphs;
    if (a.has_g()) graphs.push_back(&a.g());
    for (const auto& g : a.graphs()) graphs.push_back(&g);
    for (const GraphProto* g : graphs)
      for (auto& name : FreeNames(*g))
        if (seen.insert(name).second) out.push_back(std::move(name));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Build

std::unique_ptr<GraphPlan> GraphPlan::BuildModel(std::shared_ptr<const ModelProto> model,
                                                 RuntimeContext& context, PlanBuildScope options) {
  OL_CHECK(model != nullptr, ErrorCode::kInvalidArgument, "null model");
  PlanBuildScope scope = std::move(options);
  scope.model = model.get();
  scope.opsets = context.kernel_ctx();
  for (const auto& o : model->opset_import()) scope.opsets.set_opset(o.domain(), o.version());
  scope.base_dir = core::ModelBaseDir(*model);
  // The spec: graph-plan construction enforces the persistent-binding rules too.
  const std::vector<core::ResolvedBinding> bindings =
      core::ResolvePersistentBindings(model->graph(), model.get());
  scope.repeated_runs = !bindings.empty();
  scope.owner = std::move(model);
  const auto* m = static_cast<const ModelProto*>(scope.model);
  std::unique_ptr<GraphPlan> plan = Build(m->graph(), context, scope);
  plan->RecordAppendSites(bindings);
  return plan;
}

// A node is the append site of binding b when it directly reads b's input slot and writes
// b's output slot (the single value-use rule makes it at most one node per binding).
void GraphPlan::RecordAppendSites(const std::vector<core::ResolvedBinding>& bindings) {
  for (size_t b = 0; b < bindings.size(); ++b) {
    const int in_slot = inputs_[static_cast<size_t>(FindInput(bindings[b].input_name))].slot;
    int out_slot = -1;
    for (const Output& o : outputs_)
      if (o.name == bindings[b].output_name) out_slot = o.slot;
    for (Node& node : nodes_)
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] != in_slot) continue;
        for (size_t o = 0; o < node.outputs.size(); ++o)
          if (node.outputs[o] == out_slot && out_slot >= 0)
            node.append_sites.push_back(AppendSite{i, o, b});
      }
  }
}

// What Build carries from one phase to the next.
struct GraphPlan::Draft {
  std::string where;                       // "graph 'name'", for messages
  std::vector<int> producer;               // slot -> node index in graph order (-1: no node)
  std::vector<std::vector<int>> in_slots;  // per graph node: explicit then implicit inputs
  std::vector<int> order;                  // graph node indexes in run order
  std::vector<int> readers, last_reader;   // per slot: distinct reader nodes, last one's step
  std::vector<bool> kept;                  // per slot: a graph output (never released)
};

std::unique_ptr<GraphPlan> GraphPlan::Build(const GraphProto& graph, RuntimeContext& context,
                                            const PlanBuildScope& scope,
                                            const std::vector<std::string>& captures) {
  OL_CHECK(scope.depth < 64, ErrorCode::kInvalidModel,
           "graph '" + graph.name() + "': subgraphs or functions nest deeper than 64 levels");
  std::unique_ptr<GraphPlan> plan(new GraphPlan());
  GraphPlan& p = *plan;
  p.graph_ = &graph;
  p.scope_ = scope;
  Draft d;
  d.where = graph.name().empty() ? std::string("graph") : "graph '" + graph.name() + "'";
  p.DefineValues(d, captures);
  p.ResolveReads(d);
  d.order = p.RunOrder(d);
  // Kernels (folding included) see the plan's scope.
  ScopeGuard guard(&p.scope_);
  if (scope.fold_constants) p.FoldConstants(context, d.order, d.in_slots, d.producer);
  if (scope.fuse_subgraphs) {
    p.ApplyFusions(d.order, d.in_slots, d.producer);
    p.MergeDuplicates(d.order, d.in_slots, d.producer);
  }
  p.CountReaders(d);
  p.MakeNodes(d, context);
  p.IndexLevels(d);
  return plan;
}

int GraphPlan::NewSlot(const Draft& d, const std::string& name, const std::string& what) {
  auto [it, inserted] = slot_of_.emplace(name, static_cast<int>(slot_names_.size()));
  OL_CHECK(inserted, ErrorCode::kInvalidModel,
           d.where + ": " + what + " '" + name + "' is defined more than once");
  slot_names_.push_back(name);
  constants_.push_back(nullptr);
  return it->second;
}

// Slots for the graph inputs, captures, initializers (constants, or defaults of inputs of
// the same name) and node outputs, in that order.
void GraphPlan::DefineValues(Draft& d, const std::vector<std::string>& captures) {
  const GraphProto& graph = *graph_;
  for (const auto& v : graph.input()) {
    Input in;
    in.name = v.name();
    in.slot = NewSlot(d, v.name(), "input");
    in.type = v.has_type() ? &v.type() : nullptr;
    inputs_.push_back(std::move(in));
  }
  for (const auto& name : captures) capture_slots_.push_back(NewSlot(d, name, "captured value"));
  OL_CHECK(graph.sparse_initializer_size() == 0, ErrorCode::kNotImplemented,
           d.where + ": sparse initializers are not supported");
  auto add_initializer = [&](const std::string& name, RuntimeValue value) {
    if (slot_of_.count(name) != 0) {
      const int idx = FindInput(name);
      OL_CHECK(idx >= 0, ErrorCode::kInvalidModel,
               d.where + ": initializer '" + name + "' is defined more than once");
      inputs_[static_cast<size_t>(idx)].has_default = true;
      inputs_[static_cast<size_t>(idx)].default_value = std::move(value);
      return;
    }
    const int slot = NewSlot(d, name, "initializer");
    constant_storage_.push_back(std::make_unique<RuntimeValue>(std::move(value)));
    constants_[static_cast<size_t>(slot)] = constant_storage_.back().get();
  };
  const auto& owner = scope_.owner;
  for (const auto& t : graph.initializer())
    add_initializer(t.name(), RuntimeValue(TensorFromProto(t, owner, scope_.base_dir)));
  for (const auto& e : graph.encoded_initializer())
    add_initializer(e.name(),
                    RuntimeValue::Encoded(std::shared_ptr<const EncodedValueProto>(owner, &e)));
  for (const auto& c : graph.paged_cache_initializer())
    add_initializer(
        c.name(), RuntimeValue::FromPagedCache(std::shared_ptr<const PagedCacheProto>(owner, &c)));
  d.producer.assign(slot_names_.size(), -1);
  for (int i = 0; i < graph.node_size(); ++i)
    for (const auto& o : graph.node(i).output()) {
      if (o.empty()) continue;
      NewSlot(d, o, "output of " + NodeLabel(graph.node(i)) + ", value");
      d.producer.push_back(i);
    }
}

// The input slots of every node (explicit then implicit) and the graph outputs, checking
// that every name resolves.
void GraphPlan::ResolveReads(Draft& d) {
  const GraphProto& graph = *graph_;
  d.in_slots.resize(static_cast<size_t>(graph.node_size()));
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto& node = graph.node(i);
    auto resolve = [&](const std::string& name) {
      if (name.empty()) return -1;
      auto it = slot_of_.find(name);
      OL_CHECK(it != slot_of_.end(), ErrorCode::kInvalidModel,
               d.where + ": " + NodeLabel(node) + " reads '" + name +
                   "', which no node, graph input or initializer defines");
      return it->second;
    };
    auto& slots = d.in_slots[static_cast<size_t>(i)];
    for (const auto& in : node.input()) slots.push_back(resolve(in));
    for (const auto& in : ImplicitInputs(node)) slots.push_back(resolve(in));
  }
  for (const auto& o : graph.output()) {
    auto it = slot_of_.find(o.name());
    OL_CHECK(
        it != slot_of_.end(), ErrorCode::kInvalidModel,
        d.where + ": output '" + o.name() + "' is not defined by any node, input or initializer");
    outputs_.push_back({o.name(), it->second, false});
  }
  for (size_t a = 0; a < outputs_.size(); ++a)
    for (size_t b = 0; b < outputs_.size(); ++b)
      if (a != b && outputs_[a].slot == outputs_[b].slot) outputs_[a].shared = true;
}

// Topological order: the given order when it is valid, else Kahn's algorithm (stable, so
// equal models plan alike). A cycle is an error naming a node on it.
std::vector<int> GraphPlan::RunOrder(const Draft& d) const {
  const GraphProto& graph = *graph_;
  const int n = graph.node_size();
  std::vector<std::vector<int>> succ(static_cast<size_t>(n));
  std::vector<int> indeg(static_cast<size_t>(n), 0);
  bool given_valid = true;
  for (int i = 0; i < n; ++i) {
    std::unordered_set<int> preds;
    for (int s : d.in_slots[static_cast<size_t>(i)]) {
      const int prod = s < 0 ? -1 : d.producer[static_cast<size_t>(s)];
      if (prod < 0) continue;
      OL_CHECK(prod != i, ErrorCode::kInvalidModel,
               d.where + ": " + NodeLabel(graph.node(i)) + " reads its own output '" +
                   slot_names_[static_cast<size_t>(s)] + "' (a cycle)");
      if (prod > i) given_valid = false;
      if (preds.insert(prod).second) {
        succ[static_cast<size_t>(prod)].push_back(i);
        ++indeg[static_cast<size_t>(i)];
      }
    }
  }
  std::vector<int> order;
  if (given_valid) {
    for (int i = 0; i < n; ++i) order.push_back(i);
    return order;
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (indeg[static_cast<size_t>(i)] == 0) ready.push(i);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int j : succ[static_cast<size_t>(i)])
      if (--indeg[static_cast<size_t>(j)] == 0) ready.push(j);
  }
  for (int i = 0; i < n && static_cast<int>(order.size()) != n; ++i)
    if (indeg[static_cast<size_t>(i)] > 0)
      Throw(ErrorCode::kInvalidModel,
            d.where + ": the nodes form a cycle through " + NodeLabel(graph.node(i)));
  return order;
}

// Distinct readers per slot and the step of the last one (graph outputs are always kept).
void GraphPlan::CountReaders(Draft& d) const {
  d.readers.assign(slot_names_.size(), 0);
  d.last_reader.assign(slot_names_.size(), -1);
  d.kept.assign(slot_names_.size(), false);
  for (const auto& o : outputs_) d.kept[static_cast<size_t>(o.slot)] = true;
  for (size_t k = 0; k < d.order.size(); ++k) {
    std::unordered_set<int> seen;
    for (int s : d.in_slots[static_cast<size_t>(d.order[k])]) {
      if (s < 0 || !seen.insert(s).second) continue;
      ++d.readers[static_cast<size_t>(s)];
      d.last_reader[static_cast<size_t>(s)] = static_cast<int>(k);
    }
  }
}

// One Node per step: slots, release lists, edges and levels, then its kernel (which may
// precompute from its constant inputs: they never change while the plan lives).
void GraphPlan::MakeNodes(const Draft& d, RuntimeContext& context) {
  const int n = static_cast<int>(d.order.size());
  std::vector<int> position(d.in_slots.size(), -1);
  for (int k = 0; k < n; ++k) position[static_cast<size_t>(d.order[static_cast<size_t>(k)])] = k;
  auto releasable = [&](int s) { return !d.kept[static_cast<size_t>(s)] && !is_constant(s); };
  nodes_.resize(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    const int i = d.order[static_cast<size_t>(k)];
    const NodeProto& proto = NodeAt(i);
    Node& node = nodes_[static_cast<size_t>(k)];
    node.proto = &proto;
    node.inputs = d.in_slots[static_cast<size_t>(i)];
    for (const auto& o : proto.output()) {
      int s = o.empty() ? -1 : slot_of_.at(o);
      if (s >= 0 && d.readers[static_cast<size_t>(s)] == 0 && !d.kept[static_cast<size_t>(s)])
        s = -1;
      node.outputs.push_back(s);
    }
    std::unordered_set<int> seen;
    for (int s : node.inputs) {
      if (s < 0 || !seen.insert(s).second) continue;
      if (releasable(s)) node.reads.push_back(s);
      if (releasable(s) && d.last_reader[static_cast<size_t>(s)] == k) node.release.push_back(s);
      const int prod = d.producer[static_cast<size_t>(s)];
      if (prod < 0) continue;
      Node& from = nodes_[static_cast<size_t>(position[static_cast<size_t>(prod)])];
      if (std::find(from.successors.begin(), from.successors.end(), k) != from.successors.end())
        continue;
      from.successors.push_back(k);
      ++node.predecessor_count;
      node.level = std::max(node.level, from.level + 1);
    }
    node.input_offset = total_inputs_;
    node.output_offset = total_outputs_;
    total_inputs_ += node.inputs.size();
    total_outputs_ += node.outputs.size();

    node.kernel = MakeNodeKernel(proto, context, scope_);
    const int out0 = node.outputs.empty() ? -1 : node.outputs[0];
    if (out0 >= 0 && node.kernel->ComputesLastRowOnly())
      node.last_row_output = LastRowOutput(d, out0);
    for (int j = 0; j < proto.input_size(); ++j) {
      const int s = node.inputs[static_cast<size_t>(j)];
      if (s >= 0 && is_constant(s))
        node.kernel->OnConstantInput(static_cast<size_t>(j), *constant(s));
    }
  }
}

namespace {

// Whether `proto` maps each row of its input `s` to the same row of its output alone: a
// standard unary elementwise op, or a binary one whose other operand is a one-element
// constant (is_scalar).
template <class IsScalar>
bool RowWise(const NodeProto& proto, int s, const std::vector<int>& ins, IsScalar is_scalar) {
  static const std::unordered_set<std::string> kUnary = {
      "Tanh", "Sigmoid", "Relu", "Neg",      "Exp",      "Log",
      "Abs",  "Erf",     "Sqrt", "Softplus", "Identity", "Reciprocal"};
  static const std::unordered_set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow"};
  if ((!proto.domain().empty() && proto.domain() != "ai.onnx") || proto.output_size() != 1)
    return false;
  if (kUnary.count(proto.op_type()) != 0) return ins.size() == 1 && ins[0] == s;
  if (kBinary.count(proto.op_type()) == 0 || ins.size() != 2) return false;
  return (ins[0] == s && ins[1] != s && is_scalar(ins[1])) ||
         (ins[1] == s && ins[0] != s && is_scalar(ins[0]));
}

}  // namespace

int GraphPlan::LastRowOutput(const Draft& d, int s) const {
  auto is_scalar = [&](int slot) {
    return slot >= 0 && is_constant(slot) && constant(slot)->is_tensor() &&
           constant(slot)->tensor().numel() == 1;
  };
  for (int hops = 0; hops < 8; ++hops) {  // (exporters write at most three: Div, Tanh, Mul)
    const auto at = static_cast<size_t>(s);
    if (d.kept[at]) return d.readers[at] == 0 ? s : -1;
    if (d.readers[at] != 1) return -1;
    int reader = -1;
    for (int i : d.order)
      if (const auto& ins = d.in_slots[static_cast<size_t>(i)];
          std::find(ins.begin(), ins.end(), s) != ins.end())
        reader = i;
    if (reader < 0) return -1;
    const NodeProto& proto = NodeAt(reader);
    if (!RowWise(proto, s, d.in_slots[static_cast<size_t>(reader)], is_scalar) ||
        proto.output(0).empty())
      return -1;
    s = slot_of_.at(proto.output(0));
  }
  return -1;
}

// Reader counts for concurrent release, the source nodes and the widest level.
void GraphPlan::IndexLevels(const Draft& d) {
  readers_.assign(slot_names_.size(), 0);
  for (size_t s = 0; s < slot_names_.size(); ++s)
    if (!d.kept[s] && !is_constant(static_cast<int>(s))) readers_[s] = d.readers[s];
  std::vector<int> per_level;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const Node& node = nodes_[k];
    if (node.predecessor_count == 0) sources_.push_back(static_cast<int>(k));
    if (static_cast<size_t>(node.level) >= per_level.size())
      per_level.resize(static_cast<size_t>(node.level) + 1, 0);
    width_ = std::max(width_, ++per_level[static_cast<size_t>(node.level)]);
  }
}

// ---------------------------------------------------------------------------------------
// Constant folding

void GraphPlan::FoldConstants(RuntimeContext& context, std::vector<int>& order,
                              const std::vector<std::vector<int>>& in_slots,
                              std::vector<int>& producer) {
  const GraphProto& graph = *graph_;
  std::vector<bool> is_output(slot_names_.size(), false);
  for (const auto& o : outputs_) is_output[static_cast<size_t>(o.slot)] = true;
  // Every (node, input position) that reads a slot.
  std::vector<std::vector<std::pair<int, int>>> uses(slot_names_.size());
  for (size_t i = 0; i < in_slots.size(); ++i)
    for (size_t j = 0; j < in_slots[i].size(); ++j)
      if (in_slots[i][j] >= 0)
        uses[static_cast<size_t>(in_slots[i][j])].emplace_back(static_cast<int>(i),
                                                               static_cast<int>(j));
  std::vector<int> left;
  for (int i : order) {
    const NodeProto& proto = graph.node(i);
    const std::vector<int>& ins = in_slots[static_cast<size_t>(i)];
    bool foldable = Deterministic(proto) && static_cast<int>(ins.size()) == proto.input_size();
    for (int s : ins)
      foldable = foldable && (s < 0 || (is_constant(s) && constant(s)->is_tensor()));
    for (const auto& o : proto.output())
      foldable = foldable && (o.empty() || !is_output[static_cast<size_t>(slot_of_.at(o))]);
    std::vector<RuntimeValue> results;
    if (foldable) results = FoldNode(proto, ins, uses, context);
    if (results.empty()) {
      left.push_back(i);
      continue;
    }
    for (int o = 0; o < proto.output_size(); ++o) {
      if (proto.output(o).empty()) continue;
      const int slot = slot_of_.at(proto.output(o));
      constant_storage_.push_back(
          std::make_unique<RuntimeValue>(std::move(results[static_cast<size_t>(o)])));
      constants_[static_cast<size_t>(slot)] = constant_storage_.back().get();
      producer[static_cast<size_t>(slot)] = -1;
    }
    ++folded_nodes_;
  }
  order = std::move(left);
}

std::vector<RuntimeValue> GraphPlan::FoldNode(
    const NodeProto& proto, const std::vector<int>& ins,
    const std::vector<std::vector<std::pair<int, int>>>& uses, RuntimeContext& context) {
  std::vector<RuntimeValue> results(static_cast<size_t>(proto.output_size()));
  if (KeepsQuantizedWeight(proto, ins, uses)) return {};
  if (FoldTransposedView(proto, ins, uses, results)) return results;
  std::vector<const RuntimeValue*> in;
  for (int s : ins) in.push_back(s < 0 ? nullptr : constant(s));
  std::vector<RuntimeValue*> out;
  for (int o = 0; o < proto.output_size(); ++o)
    out.push_back(proto.output(o).empty() ? nullptr : &results[static_cast<size_t>(o)]);
  size_t bytes = 0;
  try {
    std::unique_ptr<KernelBase> kernel = MakeNodeKernel(proto, context, scope_, true);
    if (kernel == nullptr) return {};
    for (size_t j = 0; j < in.size(); ++j)
      if (in[j] != nullptr) kernel->OnConstantInput(j, *in[j]);
    KernelCall call(&context, proto, std::span<const RuntimeValue* const>(in.data(), in.size()),
                    std::span<RuntimeValue*>(out.data(), out.size()), DefaultAllocator());
    kernel->Compute(call);
  } catch (const std::exception&) {
    return {};  // the node stays: the same error reaches the caller at run time
  }
  for (size_t o = 0; o < results.size(); ++o) {
    if (out[o] == nullptr) continue;
    if (!results[o].is_tensor()) return {};
    Tensor& t = results[o].mutable_tensor();
    t.Seal();
    bool shares_input = false;
    for (const RuntimeValue* v : in)
      shares_input =
          shares_input || (v != nullptr && t.has_owner() && v->tensor().owner() == t.owner());
    if (!shares_input) bytes += t.nbytes();
  }
  if (folded_bytes_ + bytes > kFoldBudgetBytes) return {};
  folded_bytes_ += bytes;
  return results;
}

// A DequantizeLinear of a packable weight read only as MatMul's B stays unfolded: the
// fusion gives its MatMul the quantized weight (DequantizeMatMul), 4 or 8 bits a value
// instead of 32.
bool GraphPlan::KeepsQuantizedWeight(
    const NodeProto& proto, const std::vector<int>& ins,
    const std::vector<std::vector<std::pair<int, int>>>& uses) const {
  if (!scope_.fuse_subgraphs || proto.op_type() != "DequantizeLinear" || ins.size() < 2 ||
      proto.output_size() != 1 || proto.output(0).empty())
    return false;
  auto tensor = [&](size_t i) -> const Tensor* {
    return i < ins.size() && ins[i] >= 0 ? &constant(ins[i])->tensor() : nullptr;
  };
  if (!PackableDequantize(proto, tensor(0), tensor(1), tensor(2))) return false;
  // One reader only: the fusion must take the pair, or the weight would be dequantized per call.
  const auto& readers = uses[static_cast<size_t>(slot_of_.at(proto.output(0)))];
  if (readers.size() != 1) return false;
  const NodeProto& reader = graph_->node(readers[0].first);
  return reader.op_type() == "MatMul" && NormalDomain(reader.domain()).empty() &&
         readers[0].second == 1;
}

bool GraphPlan::FoldTransposedView(const NodeProto& proto, const std::vector<int>& ins,
                                   const std::vector<std::vector<std::pair<int, int>>>& uses,
                                   std::vector<RuntimeValue>& results) const {
  if (proto.op_type() != "Transpose" || !NormalDomain(proto.domain()).empty() || ins.size() != 1 ||
      proto.output_size() != 1 || proto.output(0).empty())
    return false;
  const Tensor& x = constant(ins[0])->tensor();
  if (x.rank() != 2 || (x.dtype() != DataType::kFloat && x.dtype() != DataType::kFloat16) ||
      !x.contiguous() || !x.has_owner())
    return false;
  for (const auto& a : proto.attribute())
    if (a.name() == "perm" && !(a.ints_size() == 2 && a.ints(0) == 1 && a.ints(1) == 0))
      return false;
  for (const auto& [node, index] : uses[static_cast<size_t>(slot_of_.at(proto.output(0)))]) {
    const NodeProto& reader = graph_->node(node);
    if (reader.op_type() != "MatMul" || !NormalDomain(reader.domain()).empty() || index != 1)
      return false;
  }
  results[0] = RuntimeValue(Tensor::StridedView(proto.output(0), x.dtype(), {x.dim(1), x.dim(0)},
                                                {1, x.dim(1)}, x.raw_data(), x.owner()));
  return true;
}

// ---------------------------------------------------------------------------------------
// Fusions

void GraphPlan::ApplyFusions(std::vector<int>& order, std::vector<std::vector<int>>& in_slots,
                             std::vector<int>& producer) {
  const int n_graph = graph_->node_size();
  std::vector<bool> alive(static_cast<size_t>(n_graph), false);
  for (int i : order) alive[static_cast<size_t>(i)] = true;
  auto constant_tensor = [&](const std::string& name) -> const Tensor* {
    auto it = slot_of_.find(name);
    if (it == slot_of_.end() || !is_constant(it->second)) return nullptr;
    const RuntimeValue* v = constant(it->second);
    return v->is_tensor() ? &v->tensor() : nullptr;
  };
  auto graph_output = [&](const std::string& name) {
    return std::any_of(outputs_.begin(), outputs_.end(),
                       [&](const Output& o) { return o.name == name; });
  };
  for (Fusion& f : FindFusions(*graph_, alive, constant_tensor, graph_output)) {
    if (BuiltinKernels().Find(f.node.domain(), f.node.op_type(), 1) == nullptr) continue;
    if (f.node.op_type() == "DequantizeMatMul" && scope_.dequantize_matmul_accuracy_level != 0) {
      AttributeProto* level = f.node.add_attribute();
      level->set_name("accuracy_level");
      level->set_type(AttributeProto::INT);
      level->set_i(scope_.dequantize_matmul_accuracy_level);
    }
    for (const Rewire& r : f.rewired)
      in_slots[static_cast<size_t>(r.node)][static_cast<size_t>(r.input)] = slot_of_.at(r.name);
    const int index = n_graph + static_cast<int>(synthesized_.size());
    synthesized_.push_back(std::make_unique<NodeProto>(std::move(f.node)));
    const NodeProto& node = *synthesized_.back();
    std::vector<int> slots;
    for (const auto& in : node.input()) slots.push_back(in.empty() ? -1 : slot_of_.at(in));
    in_slots.push_back(std::move(slots));
    for (const auto& o : node.output()) producer[static_cast<size_t>(slot_of_.at(o))] = index;
    // The substitute runs where the last (or first, see Fusion) replaced node ran: all its
    // inputs are ready there.
    const std::unordered_set<int> removed(f.removed.begin(), f.removed.end());
    size_t at = order.size();
    for (size_t k = 0; k < order.size(); ++k)
      if (removed.count(order[k]) && (at == order.size() || !f.run_at_first)) at = k;
    std::vector<int> next;
    for (size_t k = 0; k < order.size(); ++k) {
      if (k == at)
        next.push_back(index);
      else if (!removed.count(order[k]))
        next.push_back(order[k]);
    }
    order = std::move(next);
  }
}

const NodeProto& GraphPlan::NodeAt(int i) const {
  const int n_graph = graph_->node_size();
  return i < n_graph ? graph_->node(i) : *synthesized_[static_cast<size_t>(i - n_graph)];
}

int GraphPlan::FindSlot(const std::string& name) const {
  auto it = slot_of_.find(name);
  return it == slot_of_.end() ? -1 : it->second;
}

int GraphPlan::FindInput(const std::string& name) const {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].name == name) return static_cast<int>(i);
  return -1;
}

// ---------------------------------------------------------------------------------------
// Frames

RunFrame::RunFrame(const GraphPlan& plan)
    : plan_(&plan),
      slots_(plan.slot_count()),
      input_ptrs_(plan.total_node_inputs()),
      output_ptrs_(plan.total_node_outputs()) {}

void RunFrame::ResetReaderCounts() {
  const size_t n = plan_->slot_count();
  if (!remaining_) remaining_ = std::make_unique<std::atomic<int>[]>(n);
  for (size_t s = 0; s < n; ++s)
    remaining_[s].store(plan_->readers(static_cast<int>(s)), std::memory_order_relaxed);
}

const RuntimeValue* RunFrame::Get(int slot) const {
  if (const RuntimeValue* c = plan_->constant(slot)) return c;
  const RuntimeValue& v = slots_[static_cast<size_t>(slot)];
  return v.empty() ? nullptr : &v;
}

RuntimeValue RunFrame::Take(int slot) {
  if (const RuntimeValue* c = plan_->constant(slot)) return *c;
  return std::move(slots_[static_cast<size_t>(slot)]);
}

RuntimeValue RunFrame::TakeOutput(size_t i) {
  const auto& out = plan_->outputs()[i];
  if (out.shared) {
    const RuntimeValue* v = Get(out.slot);
    return v ? *v : RuntimeValue();
  }
  return Take(out.slot);
}

void RunFrame::Reset() {
  for (auto& v : slots_) v = RuntimeValue();
}

void RunFrame::FillDefaults() {
  for (const auto& in : plan_->inputs()) {
    RuntimeValue& v = slots_[static_cast<size_t>(in.slot)];
    if (!v.empty()) continue;
    OL_CHECK(in.has_default, ErrorCode::kInvalidArgument,
             "missing required input '" + in.name + "'");
    v = in.default_value;
  }
}

RuntimeValue* RunFrame::FindValue(const std::string& name) {
  int slot = plan_->FindSlot(name);
  if (slot < 0 || plan_->is_constant(slot)) return nullptr;
  return &slots_[static_cast<size_t>(slot)];
}

// ---------------------------------------------------------------------------------------
// Type checks

void CheckValueType(const RuntimeValue& value, const TypeProto* type, const std::string& what) {
  if (type == nullptr || type->value_case() == TypeProto::VALUE_NOT_SET) return;
  auto mismatch = [&](const std::string& detail) {
    Throw(ErrorCode::kInvalidArgument, what + ": " + detail);
  };
  switch (type->value_case()) {
    case TypeProto::kTensorType: {
      if (value.is_encoded()) return;  // checked against its logical type by the state layer
      if (!value.is_tensor())
        mismatch(std::string("expected a tensor, got a ") + RuntimeValue::KindName(value.kind()));
      const Tensor& t = value.tensor();
      const auto& tt = type->tensor_type();
      if (tt.elem_type() != 0 && static_cast<int32_t>(t.dtype()) != tt.elem_type())
        mismatch("expected dtype " + DataTypeName(static_cast<DataType>(tt.elem_type())) +
                 ", got " + DataTypeName(t.dtype()));
      if (!tt.has_shape()) return;
      if (t.rank() != tt.shape().dim_size())
        mismatch("expected rank " + std::to_string(tt.shape().dim_size()) + ", got shape " +
                 ShapeToString(t.shape()));
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() != t.shape()[static_cast<size_t>(d)])
          mismatch("dimension " + std::to_string(d) + " must be " +
                   std::to_string(dim.dim_value()) + ", got shape " + ShapeToString(t.shape()));
      }
      return;
    }
    case TypeProto::kSequenceType:
      if (!value.is_sequence())
        mismatch(std::string("expected a sequence, got a ") + RuntimeValue::KindName(value.kind()));
      return;
    case TypeProto::kStructType:
      if (!value.is_struct() && !value.is_encoded())
        mismatch(std::string("expected a struct, got a ") + RuntimeValue::KindName(value.kind()));
      return;
    default:
      Throw(ErrorCode::kNotImplemented,
            what + ": values of " + core::TypeKindName(*type) + " type are not supported");
  }
}

// ---------------------------------------------------------------------------------------
// Running nodes

namespace {

[[noreturn]] void RethrowWithNode(const NodeProto& node) {
  const std::string label = NodeLabel(node);
  try {
    throw;
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(label, 0) == 0) throw;  // already names this node
    throw Error(e.code(), label + ": " + msg);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, label + ": out of memory (an allocation failed)");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kRuntime, label + ": " + e.what());
  }
}

}  // namespace

void RunPlanNode(const GraphPlan& plan, size_t index, RunFrame& frame, RuntimeContext& context,
                 const RunOptions& options, bool concurrent) {
  const GraphPlan::Node& node = plan.nodes()[index];
  if (options.cancel_requested != nullptr &&
      options.cancel_requested->load(std::memory_order_acquire))
    Throw(ErrorCode::kCancelled, "run cancelled before " + NodeLabel(*node.proto));

  const RuntimeValue** in = frame.input_scratch().data() + node.input_offset;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    in[i] = node.inputs[i] < 0 ? nullptr : frame.Get(node.inputs[i]);
  RuntimeValue** out = frame.output_scratch().data() + node.output_offset;
  for (size_t i = 0; i < node.outputs.size(); ++i)
    out[i] = node.outputs[i] < 0 ? nullptr : &frame.mutable_slot(node.outputs[i]);

  const bool timed = context.events_enabled() || options.profile != nullptr;
  std::chrono::steady_clock::time_point start;
  try {
    fault_injection::Check(FaultSite::kNode);
    if (timed) start = std::chrono::steady_clock::now();
    // Strided views (append-capacity caches) reach only kernels that read them through
    // strides; every other kernel gets a dense copy that lives for this call.
    std::vector<RuntimeValue> dense_copies;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (in[i] == nullptr || !in[i]->is_tensor() || in[i]->tensor().contiguous() ||
          node.kernel->ReadsStridedInput(i))
        continue;
      if (dense_copies.empty()) dense_copies.reserve(node.inputs.size());
      dense_copies.emplace_back(in[i]->tensor().Contiguous(context.allocator()));
      in[i] = &dense_copies.back();
    }
    KernelCall call(&context, *node.proto,
                    std::span<const RuntimeValue* const>(in, node.inputs.size()),
                    std::span<RuntimeValue*>(out, node.outputs.size()), context.allocator());
    call.set_append_sites(node.append_sites);
    if (node.last_row_output >= 0 && options.last_position_outputs != nullptr) {
      const auto& names = *options.last_position_outputs;
      const std::string& wanted = plan.slot_name(node.last_row_output);
      call.set_last_row_only(std::find(names.begin(), names.end(), wanted) != names.end());
    }
    node.kernel->Compute(call);
  } catch (...) {
    RethrowWithNode(*node.proto);
  }
  const int64_t duration_ns = timed ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now() - start)
                                          .count()
                                    : 0;
  if (options.profile != nullptr)
    options.profile->AddNode(*node.proto, static_cast<uint64_t>(duration_ns));
  if (context.events_enabled()) {
    RuntimeEvent event;
    event.duration_ns = duration_ns;
    event.action = RuntimeEventAction::kKernel;
    event.node_name = node.proto->name();
    event.op_type = node.proto->op_type();
    event.allocated_bytes = context.allocator().live_bytes();
    event.peak_bytes = context.allocator().peak_bytes();
    context.RecordEvent(std::move(event));
  }
  if (concurrent) {
    for (int s : node.reads)
      if (frame.remaining_readers(s).fetch_sub(1, std::memory_order_acq_rel) == 1)
        frame.mutable_slot(s) = RuntimeValue();
  } else {
    for (int s : node.release) frame.mutable_slot(s) = RuntimeValue();
  }
}

void ExecuteInline(const GraphPlan& plan, RunFrame& frame, RuntimeContext& context,
                   const RunOptions& options) {
  for (size_t i = 0; i < plan.nodes().size(); ++i) RunPlanNode(plan, i, frame, context, options);
}

// ---------------------------------------------------------------------------------------
// Common subexpressions

namespace {

// What a node computes, as a key: domain, op, explicit input count, input slots and
// attributes (sorted by name: their order does not matter). Empty for nodes never merged:
// custom domains (a user's kernel may count its calls), random ops, control flow.
std::string ComputationKey(const NodeProto& proto, const std::vector<int>& ins) {
  const std::string domain = NormalDomain(proto.domain());
  if ((!domain.empty() && domain != kFusedDomain) || !Deterministic(proto)) return {};
  std::string key = domain + '\n' + proto.op_type() + '\n' + std::to_string(proto.input_size());
  for (int s : ins) key += ',' + std::to_string(s);
  std::vector<std::string> attributes;
  for (const auto& a : proto.attribute()) attributes.push_back(a.SerializeAsString());
  std::sort(attributes.begin(), attributes.end());
  for (const auto& a : attributes) key += '\n' + std::to_string(a.size()) + ':' + a;
  return key;
}

}  // namespace

// Small constants of equal type, shape and bytes read as one slot, so that nodes differing
// only in which of them they read merge below: exporters write a Constant node per use (the
// TorchScript exporter an axis or index per Unsqueeze, Gather and Concat of every layer).
void GraphPlan::AliasEqualSmallConstants(const std::vector<bool>& is_output,
                                         std::vector<int>& alias) const {
  constexpr int64_t kMaxElements = 16;
  std::unordered_map<std::string, int> first;  // type, shape and bytes -> slot
  for (size_t s = 0; s < alias.size(); ++s) {
    const RuntimeValue* v = constants_[s];
    if (v == nullptr || is_output[s] || !v->is_tensor()) continue;
    const Tensor& t = v->tensor();
    if (t.numel() > kMaxElements || !t.contiguous() || t.dtype() == DataType::kString) continue;
    std::string key = std::to_string(static_cast<int>(t.dtype())) + ':' + ShapeToString(t.shape());
    key.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    alias[s] = first.emplace(std::move(key), static_cast<int>(s)).first->second;
  }
}

void GraphPlan::MergeDuplicates(std::vector<int>& order, std::vector<std::vector<int>>& in_slots,
                                std::vector<int>& producer) {
  std::vector<bool> is_output(slot_names_.size(), false);
  for (const auto& o : outputs_) is_output[static_cast<size_t>(o.slot)] = true;
  std::vector<int> alias(slot_names_.size());
  for (size_t s = 0; s < alias.size(); ++s) alias[s] = static_cast<int>(s);
  AliasEqualSmallConstants(is_output, alias);
  std::unordered_map<std::string, int> first;  // key -> node computing it
  std::vector<int> left;
  for (int i : order) {
    std::vector<int>& ins = in_slots[static_cast<size_t>(i)];
    for (int& s : ins)
      if (s >= 0) s = alias[static_cast<size_t>(s)];
    const NodeProto& proto = NodeAt(i);
    const std::string key = ComputationKey(proto, ins);
    auto [it, fresh] = key.empty() ? std::pair{first.end(), true} : first.emplace(key, i);
    const NodeProto* earlier = fresh ? nullptr : &NodeAt(it->second);
    bool mergeable = earlier != nullptr && earlier->output_size() == proto.output_size();
    for (int o = 0; mergeable && o < proto.output_size(); ++o) {
      if (proto.output(o).empty()) continue;
      // A graph output keeps its node (its slot is what the caller gets back).
      mergeable = !earlier->output(o).empty() &&
                  !is_output[static_cast<size_t>(slot_of_.at(proto.output(o)))];
    }
    if (!mergeable) {
      left.push_back(i);
      continue;
    }
    for (int o = 0; o < proto.output_size(); ++o) {
      if (proto.output(o).empty()) continue;
      const int slot = slot_of_.at(proto.output(o));
      alias[static_cast<size_t>(slot)] = slot_of_.at(earlier->output(o));
      producer[static_cast<size_t>(slot)] = -1;
    }
    ++merged_nodes_;
  }
  order = std::move(left);
}

}  // namespace onnx_light::core::runtime
