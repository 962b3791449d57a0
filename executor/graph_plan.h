// GraphPlan: a graph compiled once — topological order, an integer slot per value name,
// kernel instances, the last consumer of every intermediate and the parallel width. A run
// only indexes vectors: no string hashing, no graph walk, no schema lookup.
//
// RunFrame: one run's values, one per slot (the spec's "fresh child context" is a cleared
// frame). Constants (initializers that are not graph inputs) live in the plan and are read
// in place, never copied into frames.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/runtime_value.h"
#include "executor/kernel.h"
#include "executor/runtime_context.h"

namespace onnx_light {
class GraphProto;
class ModelProto;
class FunctionProto;
class TypeProto;
}  // namespace onnx_light

namespace onnx_light::core {
struct ResolvedBinding;
}  // namespace onnx_light::core

namespace onnx_light::core::runtime {

class NodeProfile;

struct RunOptions {
  // Checked between nodes; when it reads true the run stops with Error(kCancelled).
  const std::atomic<bool>* cancel_requested = nullptr;
  // One lease per persistent binding (state runs only; executor/persistent_append.h),
  // attached to the run's child context by RuntimeSession::Execute.
  std::span<BindingLease* const> binding_leases = {};
  // Graph outputs the caller reads only at the last position (generate's logits). A node
  // that produces one of them directly and can (KernelBase::ComputesLastRowOnly) computes
  // only the last row along axis -2: the output comes back with that axis of length 1.
  const std::vector<std::string>* last_position_outputs = nullptr;
  // Largest tensor a kernel may allocate in this run (core/checked_math.h); 0 = the process
  // default. RuntimeSession::Execute sets it from RuntimeSessionOptions::max_tensor_bytes.
  size_t max_tensor_bytes = 0;
  // The run's memory limit (RuntimeSessionOptions::max_run_bytes), installed on every
  // thread that runs a node; null = none. Set by RuntimeSession::Execute.
  RunBudget* run_budget = nullptr;
  // Where each node's wall time is added (RuntimeSessionOptions::profile); null: not timed
  // unless events are enabled.
  NodeProfile* profile = nullptr;
};

// What sub-plan builders (control-flow kernels, function calls) need from the plan being
// built. Available through CurrentPlanBuildScope() while a kernel factory runs.
struct PlanBuildScope {
  std::shared_ptr<const void> owner;  // keeps `model` (and every proto in it) alive
  const ModelProto* model = nullptr;  // model-local functions; may be null
  KernelContext opsets;               // the model's opset_import over the context's
  int depth = 0;                      // nesting of sub-plans (bounded against recursion)
  std::string base_dir;               // where external initializer data lives (model file's dir)
  // Evaluate nodes whose inputs are all constants once, at build time (see Build).
  bool fold_constants = true;
  // Replace exported subgraphs by fused kernels (executor/fusion.h).
  bool fuse_subgraphs = true;
  // The accuracy_level the fused DequantizeMatMul nodes get (RuntimeSessionOptions).
  int dequantize_matmul_accuracy_level = 0;
  // The plan runs once per step of a loop (its model declares persistent bindings), so its
  // second call always follows the first: kernels pack their constant weights on their
  // first use (ops/math/constant_weight.h) instead of waiting for the second.
  bool repeated_runs = false;
};
// Non-null only inside GraphPlan::Build (on the building thread).
const PlanBuildScope* CurrentPlanBuildScope();

// Names a graph reads but does not define (inputs of its nodes, its outputs, and free names
// of nested subgraphs), in order of first appearance: the values it captures from outer
// scopes.
std::vector<std::string> FreeNames(const GraphProto& graph);
// The outer-scope names a node's graph attributes capture, in a fixed order. The executor
// passes them to the kernel as extra inputs after the node's own inputs.
std::vector<std::string> ImplicitInputs(const NodeProto& node);

class GraphPlan {
 public:
  struct Input {
    std::string name;
    int slot = -1;
    const TypeProto* type = nullptr;  // declared type; null when undeclared
    bool has_default = false;         // an initializer of the same name
    RuntimeValue default_value;
  };
  struct Output {
    std::string name;
    int slot = -1;
    bool shared = false;  // another output names the same value: hand out copies
  };
  struct Node {
    const NodeProto* proto = nullptr;
    std::unique_ptr<KernelBase> kernel;
    std::vector<int> inputs;   // slot per input (explicit then implicit); -1 when omitted
    std::vector<int> outputs;  // slot per output; -1 when unnamed or never read
    std::vector<int> release;  // slots whose last reader (in plan order) is this node
    std::vector<int> reads;    // distinct releasable slots it reads (concurrent runs count)
    std::vector<int> successors;
    int predecessor_count = 0;
    int level = 0;  // longest path from a source
    // The kernel can compute output 0's last row alone, and that row alone reaches the graph
    // output in this slot (output 0 itself, or through row-wise elementwise nodes: an LM
    // head's soft cap or logit scale): it does so when that output is asked for at the last
    // position (RunOptions::last_position_outputs). -1: never.
    int last_row_output = -1;
    size_t input_offset = 0, output_offset = 0;  // into a frame's pointer scratch
    // Root plans: where this node directly reads a bound input and writes its bound output
    // (KernelCall::append_lease). Empty in sub-plans, which never get leases.
    std::vector<AppendSite> append_sites;
  };

  // Compiles `graph`. `owner` keeps the graph's protos alive (initializers become zero-copy
  // views on it). `captures` are names provided by an enclosing scope (subgraphs).
  // With scope.fold_constants, a deterministic built-in node whose inputs are all constants
  // (initializers that are not graph inputs, or outputs of such folded nodes) and none of
  // whose outputs is a graph output runs once here; its outputs become plan constants and
  // the node leaves the plan. A node that reads a graph input or a captured value is never
  // folded. Folded bytes per plan stay within kFoldBudgetBytes (larger results stay nodes);
  // a Transpose of a FLOAT or FLOAT16 matrix read only as MatMul's B folds to a transposed
  // view of the constant's bytes (no copy: MatMul reads it as B^T).
  static constexpr size_t kFoldBudgetBytes = size_t{1} << 30;
  static std::unique_ptr<GraphPlan> Build(const GraphProto& graph, RuntimeContext& context,
                                          const PlanBuildScope& scope,
                                          const std::vector<std::string>& captures = {});
  // A root plan for `model`'s main graph; `options` gives the switches (fold_constants,
  // fuse_subgraphs, ...), the model and its opsets are filled in here.
  static std::unique_ptr<GraphPlan> BuildModel(std::shared_ptr<const ModelProto> model,
                                               RuntimeContext& context, PlanBuildScope options);

  const GraphProto& graph() const { return *graph_; }
  size_t slot_count() const { return slot_names_.size(); }
  const std::string& slot_name(int slot) const { return slot_names_[static_cast<size_t>(slot)]; }
  int FindSlot(const std::string& name) const;  // -1 when absent (hashes: not for hot paths)
  bool is_constant(int slot) const { return constants_[static_cast<size_t>(slot)] != nullptr; }
  const RuntimeValue* constant(int slot) const { return constants_[static_cast<size_t>(slot)]; }

  const std::vector<Input>& inputs() const { return inputs_; }
  int FindInput(const std::string& name) const;  // index into inputs(), -1 when absent
  const std::vector<Output>& outputs() const { return outputs_; }
  const std::vector<int>& capture_slots() const { return capture_slots_; }
  const std::vector<Node>& nodes() const { return nodes_; }  // topological order
  const std::vector<int>& sources() const { return sources_; }
  int width() const { return width_; }  // size of the widest level (an antichain)
  // Distinct reader nodes of a releasable slot (0 for constants and graph outputs).
  int readers(int slot) const { return readers_[static_cast<size_t>(slot)]; }
  // Nodes evaluated at build time (removed from nodes()) and the bytes they allocated.
  size_t folded_node_count() const { return folded_nodes_; }
  // Nodes the plan substituted for exported subgraphs (executor/fusion.h).
  size_t fused_node_count() const { return synthesized_.size(); }
  // Nodes removed because an earlier node computes the same value (with fuse_subgraphs):
  // exporters repeat the same shape arithmetic in every layer.
  size_t merged_node_count() const { return merged_nodes_; }
  size_t folded_bytes() const { return folded_bytes_; }
  size_t total_node_inputs() const { return total_inputs_; }
  size_t total_node_outputs() const { return total_outputs_; }
  const PlanBuildScope& scope() const { return scope_; }

 private:
  struct Draft;
  GraphPlan() = default;
  // The phases of Build, in order (executor/graph_plan.cc).
  int NewSlot(const Draft& d, const std::string& name, const std::string& what);
  void DefineValues(Draft& d, const std::vector<std::string>& captures);
  void ResolveReads(Draft& d);
  std::vector<int> RunOrder(const Draft& d) const;
  void CountReaders(Draft& d) const;
  void MakeNodes(const Draft& d, RuntimeContext& context);
  // Node::last_row_output of a node whose output 0 is slot `s`.
  int LastRowOutput(const Draft& d, int s) const;
  void IndexLevels(const Draft& d);
  // Fills Node::append_sites for the root plan's persistent bindings (in their order).
  void RecordAppendSites(const std::vector<core::ResolvedBinding>& bindings);
  // Constant folding (see Build): removes folded nodes from `order` and their outputs from
  // `producer`; `in_slots` are the graph nodes' input slots.
  void FoldConstants(RuntimeContext& context, std::vector<int>& order,
                     const std::vector<std::vector<int>>& in_slots, std::vector<int>& producer);
  // The outputs of `proto` evaluated on its constant inputs; empty when it is not folded.
  std::vector<RuntimeValue> FoldNode(const NodeProto& proto, const std::vector<int>& ins,
                                     const std::vector<std::vector<std::pair<int, int>>>& uses,
                                     RuntimeContext& context);
  // Substitutes fused nodes (executor/fusion.h) in `order`; their indices follow the
  // graph's nodes (NodeAt).
  void ApplyFusions(std::vector<int>& order, std::vector<std::vector<int>>& in_slots,
                    std::vector<int>& producer);
  // Common subexpressions: a node of the standard or fused domain that computes what an
  // earlier node computes (same op, attributes and input slots) leaves `order`, and its
  // readers read the earlier node's outputs instead (see merged_node_count).
  void MergeDuplicates(std::vector<int>& order, std::vector<std::vector<int>>& in_slots,
                       std::vector<int>& producer);
  void AliasEqualSmallConstants(const std::vector<bool>& is_output, std::vector<int>& alias) const;
  const NodeProto& NodeAt(int i) const;
  bool KeepsQuantizedWeight(const NodeProto& proto, const std::vector<int>& ins,
                            const std::vector<std::vector<std::pair<int, int>>>& uses) const;
  bool FoldTransposedView(const NodeProto& proto, const std::vector<int>& ins,
                          const std::vector<std::vector<std::pair<int, int>>>& uses,
                          std::vector<RuntimeValue>& results) const;

  const GraphProto* graph_ = nullptr;
  PlanBuildScope scope_;
  std::vector<std::string> slot_names_;
  std::unordered_map<std::string, int> slot_of_;
  std::vector<std::unique_ptr<RuntimeValue>> constant_storage_;
  std::vector<const RuntimeValue*> constants_;  // per slot; null unless constant
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  std::vector<int> capture_slots_;
  std::vector<Node> nodes_;
  std::vector<int> sources_;
  std::vector<int> readers_;
  int width_ = 0;
  size_t total_inputs_ = 0, total_outputs_ = 0;
  size_t folded_nodes_ = 0, folded_bytes_ = 0, merged_nodes_ = 0;
  std::vector<std::unique_ptr<NodeProto>> synthesized_;  // fused nodes, owned by the plan
};

// One run's slots. Bind it to a child context with context.MakeChild(&frame) so custom
// kernels' get_value/put_value reach the slots.
class RunFrame final : public ValueScope {
 public:
  explicit RunFrame(const GraphPlan& plan);
  const GraphPlan& plan() const { return *plan_; }

  void Set(int slot, RuntimeValue value) { slots_[static_cast<size_t>(slot)] = std::move(value); }
  // The value in `slot` (constants read from the plan); null when empty.
  const RuntimeValue* Get(int slot) const;
  // Moves the value out (constants are shared, not moved).
  RuntimeValue Take(int slot);
  // Output i of the plan, moved out of its slot (copied when another output shares it).
  RuntimeValue TakeOutput(size_t i);
  RuntimeValue& mutable_slot(int slot) { return slots_[static_cast<size_t>(slot)]; }
  // Empties every slot (a fresh frame for the next run; capacity is kept).
  void Reset();
  // Graph inputs not yet set get their initializer default; a missing required input
  // throws kInvalidArgument naming it.
  void FillDefaults();

  RuntimeValue* FindValue(const std::string& name) override;

  // Executor scratch: per-node input/output pointer arrays (disjoint ranges per node).
  std::vector<const RuntimeValue*>& input_scratch() { return input_ptrs_; }
  std::vector<RuntimeValue*>& output_scratch() { return output_ptrs_; }
  // Per-slot countdown of readers for concurrent execution (the last reader releases).
  void ResetReaderCounts();
  std::atomic<int>& remaining_readers(int slot) { return remaining_[static_cast<size_t>(slot)]; }

 private:
  const GraphPlan* plan_;
  std::vector<RuntimeValue> slots_;
  std::vector<const RuntimeValue*> input_ptrs_;
  std::vector<RuntimeValue*> output_ptrs_;
  std::unique_ptr<std::atomic<int>[]> remaining_;
};

// Checks a value against a declared type: kind, dtype and rank; symbolic or absent dims
// match anything. `what` names the value in the message ("input 'x'").
void CheckValueType(const RuntimeValue& value, const TypeProto* type, const std::string& what);

// Runs node `index` of `plan` on `frame` in `context` (a child bound to the frame): checks
// cancellation, computes, wraps errors as "<op_type> node '<name>': <message>" keeping the
// code, records a kKernel event when enabled, then releases values past their last use
// (`concurrent`: by the frame's reader countdown instead of the plan order).
void RunPlanNode(const GraphPlan& plan, size_t index, RunFrame& frame, RuntimeContext& context,
                 const RunOptions& options, bool concurrent = false);
// Runs every node in order on the calling thread.
void ExecuteInline(const GraphPlan& plan, RunFrame& frame, RuntimeContext& context,
                   const RunOptions& options = {});

}  // namespace onnx_light::core::runtime
