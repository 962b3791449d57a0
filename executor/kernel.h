// The kernel contract. A kernel is built once per node when a plan is compiled (its
// constructor takes the node's KernelInfo, set_node() parses attributes), and its const
// Compute() runs once per call, possibly concurrently with other calls: it must be thread
// safe and keep no per-call state in members.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "core/runtime_value.h"
#include "core/tensor.h"
#include "executor/parallel.h"
#include "executor/persistent_append.h"

namespace onnx_light {
class NodeProto;
}

namespace onnx_light::core::symbolic {
enum class Device { kCPU };
}

namespace onnx_light::core::runtime {

class RuntimeContext;

// The operator sets in force: domain -> version ("" is the default ONNX domain).
using OpsetMap = std::map<std::string, int64_t>;
OpsetMap default_opset(int64_t onnx_version = 18);

class KernelContext {
 public:
  explicit KernelContext(int64_t onnx_version = 18) : opsets_(default_opset(onnx_version)) {}
  explicit KernelContext(OpsetMap opsets) : opsets_(std::move(opsets)) {}
  // 0 when the domain is not imported.
  int64_t opset(const std::string& domain) const {
    auto it = opsets_.find(domain == "ai.onnx" ? std::string() : domain);
    return it == opsets_.end() ? 0 : it->second;
  }
  const OpsetMap& opsets() const { return opsets_; }
  // Imports `domain` at `version`, replacing an earlier version.
  void set_opset(const std::string& domain, int64_t version) {
    opsets_[domain == "ai.onnx" ? std::string() : domain] = version;
  }

 private:
  OpsetMap opsets_;
};

// What a kernel is built from (cf. onnxruntime's OpKernelInfo): its node, the since-version
// of the registered kernel chosen for it, and the operator sets in force where the node
// sits (the model's opset_import over the context's defaults; in a model-local function's
// body, the function's own opset_import; control-flow bodies inherit the enclosing graph's).
// Kernels read opsets here, never from the caller's KernelContext. It refers to the plan
// builder's data: valid only while the factory runs.
class KernelInfo {
 public:
  KernelInfo(const NodeProto& node, const KernelContext& opsets, int64_t since_version = 1)
      : node_(&node), opsets_(&opsets), since_version_(since_version) {}
  const NodeProto& node() const { return *node_; }
  int64_t since_version() const { return since_version_; }
  // The version of `domain` in force for this node (0 when the domain is not imported).
  int64_t opset(const std::string& domain) const { return opsets_->opset(domain); }
  // The version of the node's own domain in force for this node.
  int64_t node_opset() const;
  const KernelContext& kernel_ctx() const { return *opsets_; }

 private:
  const NodeProto* node_;
  const KernelContext* opsets_;
  int64_t since_version_;
};

// One invocation of one node: its inputs, where its outputs go, and the (per-call child)
// context. Built by the executor; tests may build one directly (context may be null).
class KernelCall {
 public:
  KernelCall(RuntimeContext* context, const NodeProto& node,
             std::span<const RuntimeValue* const> inputs, std::span<RuntimeValue*> outputs,
             Allocator& allocator = DefaultAllocator())
      : context_(context), node_(node), inputs_(inputs), outputs_(outputs), allocator_(allocator) {}

  const NodeProto& node() const { return node_; }
  size_t input_count() const { return inputs_.size(); }
  // False for an omitted optional input (empty name, or beyond the node's input list).
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  const RuntimeValue& input_value(size_t i) const;  // throws, naming the node, when absent
  const Tensor& input(size_t i) const;              // ... or when it is not a tensor

  size_t output_count() const { return outputs_.size(); }
  // False for an output whose name is empty or that no one consumes.
  bool output_wanted(size_t i) const { return i < outputs_.size() && outputs_[i] != nullptr; }
  // Output 0 is wanted at the last position only (the last row along axis -2): set by the
  // executor for kernels that ComputesLastRowOnly (RunOptions::last_position_outputs).
  bool last_row_only() const { return last_row_only_; }
  void set_last_row_only(bool value) { last_row_only_ = value; }
  // The lease of the persistent binding this node reads at input `input` and writes at
  // output `output`, when the plan recorded that pair as the node's append site and the run
  // carries leases (a state's run of the root plan); null otherwise.
  BindingLease* append_lease(size_t input, size_t output) const;
  // Set by the executor from GraphPlan::Node::append_sites.
  void set_append_sites(std::span<const AppendSite> sites) { append_sites_ = sites; }
  // Allocates output i (named after the node's output) and returns it for writing.
  Tensor& AllocateOutput(size_t i, DataType dtype, Shape shape);
  void SetOutput(size_t i, Tensor tensor);
  void SetOutputValue(size_t i, RuntimeValue value);

  // Intra-op parallelism (executor/parallel.h): the threads of the session arena this call
  // runs in, and a loop split across them.
  int64_t threads() const { return IntraOpThreads(); }
  template <typename F>
  void ParallelFor(int64_t n, int64_t grain, const F& fn) const {
    runtime::ParallelFor(n, grain, fn);
  }

  bool has_context() const { return context_ != nullptr; }
  RuntimeContext& context() const;  // throws when built without one
  Allocator& allocator() const { return allocator_; }

  // Throws kInvalidArgument with "<op> node '<name>': <message>".
  [[noreturn]] void Fail(const std::string& message) const;

 private:
  RuntimeContext* context_;
  const NodeProto& node_;
  std::span<const RuntimeValue* const> inputs_;
  std::span<RuntimeValue*> outputs_;
  Allocator& allocator_;
  Tensor scratch_output_;  // target of AllocateOutput for unwanted outputs
  std::span<const AppendSite> append_sites_;
  bool last_row_only_ = false;
};

class KernelBase {
 public:
  virtual ~KernelBase() = default;
  // Records the node and parses its attributes (Configure). Call once, before Compute.
  void set_node(const NodeProto& node);
  const NodeProto& node() const;
  virtual void Compute(KernelCall& call) const = 0;
  // Called by the plan builder, after set_node and before any Compute, for each explicit
  // input `index` bound to a plan constant (an initializer that is not a graph input):
  // `value` keeps those bytes unchanged for the plan's, hence the kernel's, lifetime. A
  // kernel may precompute from it (e.g. pack a weight once); the default ignores it.
  virtual void OnConstantInput(size_t index, const RuntimeValue& value) {
    (void)index;
    (void)value;
  }
  // Whether Compute reads input `index` through strides when it is a strided view (see
  // core/tensor.h). The executor hands every other input to the kernel as a dense copy.
  virtual bool ReadsStridedInput(size_t index) const {
    (void)index;
    return false;
  }
  // Whether Compute honours KernelCall::last_row_only() for output 0 (see RunOptions).
  virtual bool ComputesLastRowOnly() const { return false; }

 protected:
  // Parse attributes here; throw Error(kInvalidModel/kNotImplemented) naming the node.
  virtual void Configure(const NodeProto& node) { (void)node; }

 private:
  const NodeProto* node_ = nullptr;
};

// Builds the kernel of `node` (info.node() is `node`). `context` is the context the plan is
// built for: its custom kernels and allocator, not the opsets in force (ask `info`).
using KernelFactory = std::function<std::unique_ptr<KernelBase>(
    const NodeProto& node, RuntimeContext& context, const KernelInfo& info)>;

// The usual factory: construct K from `info` (K(const KernelInfo&)), or from the opsets in
// force for kernels that need no more (K(const KernelContext&)), then set_node.
template <class K>
std::unique_ptr<KernelBase> MakeKernel(const NodeProto& node, RuntimeContext& context,
                                       const KernelInfo& info);

}  // namespace onnx_light::core::runtime
