// RuntimeSession: the compiled model. The plan (executor/graph_plan.h: kernel instances,
// folded constants, packed weights) is built once per kernel configuration (the first Run
// with a context, or eagerly) and cached; runs only fill a frame of slots. Small or
// chain-shaped plans run inline on the calling thread, wider ones on a reusable
// tbb::flow::graph inside the session's tbb::task_arena.
//
// A session is immutable once built (every member function is const) and is meant to be
// shared: many PersistentValueStates (state/) and concurrent runs use one session, and
// SessionCache (executor/session_cache.h) hands out one session per model object.
//
// Plans per configuration: contexts whose configuration is equivalent (same opsets, same
// allocator, no custom kernels) share one plan, so a new RuntimeContext per call does not
// re-plan the model. A plan whose contexts are all gone (only the session still holds their
// configuration) and that no run uses is dropped the next time a plan is built.
//
// Threading: Run may be called concurrently (each run has its own frame and child context;
// flow graphs are pooled, one per concurrent run). Do not change the context's configuration
// during a call. A RunFrame must not outlive the contexts of its plan.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/runtime_value.h"
#include "executor/graph_plan.h"
#include "executor/runtime_context.h"

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core::runtime {

class NodeProfile;

struct RuntimeSessionOptions {
  int intra_op_threads = 0;  // threads of the session's arena; 0 = all cores
  // Initial append capacity of persistent tensors (PersistentValueState only; 0 disables).
  size_t persistent_tensor_initial_capacity = 32;
  enum class ExecutorMode { kAuto, kInline, kFlowGraph };
  ExecutorMode executor = ExecutorMode::kAuto;
  // Evaluate subgraphs that depend only on constants once, when the plan is built
  // (GraphPlan::Build). Off: every node runs on every call (for comparisons).
  bool fold_constants = true;
  // Replace subgraphs exporters write (torch's decomposed attention) by fused kernels when
  // the plan is built (executor/fusion.h). Off: the graph's own nodes run.
  bool fuse_subgraphs = true;
  // MatMul(A, DequantizeLinear(W)) fused into DequantizeMatMul computes exactly in float (0,
  // the default) or, at 4, quantizes A to int8 per 32 values as MatMulNBits accuracy_level 4
  // (and onnxruntime's session.qdq_matmulnbits_accuracy_level) do: 4-bit weights with blocks
  // of a multiple of 32, at most 4 rows; errors ~1e-2 relative. Other values are refused.
  int dequantize_matmul_accuracy_level = 0;
  // Largest tensor (in bytes) one allocation of a run may request; a larger one fails with
  // kResourceExhausted naming the node and the size instead of exhausting the machine.
  // Default: half the physical memory (core::DefaultMaxTensorBytes()); 0 = unlimited.
  size_t max_tensor_bytes = DefaultMaxTensorBytes();
  // Most bytes one run may hold allocated at once: the requested sizes of the live
  // allocations the run's nodes made through HeapAllocator or IoArena (kernel outputs and
  // scratch, dense copies, grown caches), counted until their last owner dies. An
  // allocation past it fails with kResourceExhausted naming the node, the size and the
  // limit; the run publishes nothing. 0 (the default) = unlimited, at no cost.
  size_t max_run_bytes = 0;
  // Time every node of every run and keep the totals per node (RuntimeSession::profile()).
  bool profile = false;
  // Inline runs with several threads: how long (microseconds) the arena's other threads spin
  // for the run's next parallel kernel before going back to sleep (executor/parallel.h,
  // SpinTeamScope). Spinning saves the wake-up between a decode step's products on cores
  // that are the run's own (SmolLM2 decode 4-13% faster with 1000); a helper that finds its
  // core wanted elsewhere stops and no run spins for the next 200 ms, so on shared cores it
  // costs nothing measurable (without that it was 30% slower). 0 never spins.
  // perf/README.md has the figures.
  int spin_wait_us = 1000;

  bool operator==(const RuntimeSessionOptions&) const = default;
};

class RuntimeSession {
 public:
  // The model must outlive the session and any returned initializer views.
  explicit RuntimeSession(const ModelProto& model, RuntimeSessionOptions options = {});
  // Keeps the model alive (also inside returned initializer views).
  explicit RuntimeSession(std::shared_ptr<const ModelProto> model,
                          RuntimeSessionOptions options = {});
  // Builds the plan for `context` now instead of on the first Run.
  RuntimeSession(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                 RuntimeSessionOptions options = {});
  ~RuntimeSession();
  RuntimeSession(const RuntimeSession&) = delete;
  RuntimeSession& operator=(const RuntimeSession&) = delete;

  // Validates the feeds (unknown names, missing required inputs, dtype/rank against the
  // declarations), runs the graph in a fresh child of `context` and returns the graph
  // outputs by name, moved out of the frame (no payload copies).
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      const RunOptions& options = {}) const;
  // The same, returning only the graph outputs named in `output_names` (throws
  // kInvalidArgument naming any unknown name, before anything runs).
  RuntimeValueMap Run(RuntimeContext& context, RuntimeValueMap feeds,
                      const std::vector<std::string>& output_names,
                      const RunOptions& options = {}) const;

  // Slot-level API (no maps): get the plan for `context`, make a RunFrame(plan), Set its
  // input slots (plan.inputs()[i].slot), Execute, then TakeOutput(i) per plan.outputs().
  const GraphPlan& plan(RuntimeContext& context) const;
  // Runs `frame` (inputs set; defaults filled here) in a fresh child of `context`. The
  // frame's plan must come from plan(context) of this session.
  void Execute(RuntimeContext& context, RunFrame& frame, const RunOptions& options = {}) const;
  // Checks input `index` of `plan` against its declaration (throws kInvalidArgument).
  static void CheckFeed(const GraphPlan& plan, size_t index, const RuntimeValue& value);
  // The plan.outputs() indexes of `names` (first occurrence of each; duplicates once).
  // Throws kInvalidArgument naming every unknown name and listing the graph outputs.
  static std::vector<int> SelectOutputs(const GraphPlan& plan,
                                        const std::vector<std::string>& names);

  // The executor Execute uses for `plan` (kAuto resolved).
  RuntimeSessionOptions::ExecutorMode executor_for(const GraphPlan& plan) const;
  const ModelProto& model() const { return *model_; }
  const std::shared_ptr<const ModelProto>& model_ptr() const { return model_; }
  const RuntimeSessionOptions& options() const { return options_; }
  // Per-node wall time over this session's runs; null unless options().profile.
  NodeProfile* profile() const;
  // How many plans the session holds now (one per non-equivalent live configuration).
  size_t plan_count() const;

  // Data a layer above the executor derives from the model once per session (state/ keeps
  // its resolved persistent bindings here, so states built on a shared session do not
  // validate them again). `make` runs for the first caller of `key` (under a lock of its
  // own); its result lives as long as the session. A `make` that throws stores nothing.
  std::shared_ptr<const void> Attachment(
      const void* key, const std::function<std::shared_ptr<const void>()>& make) const;

 private:
  struct Impl;
  struct CachedPlan;
  CachedPlan& Cached(RuntimeContext& context) const;
  CachedPlan& CachedFor(const GraphPlan& plan) const;
  RuntimeValueMap RunSelected(RuntimeContext& context, RuntimeValueMap feeds,
                              const std::vector<std::string>* output_names,
                              const RunOptions& options) const;

  std::shared_ptr<const ModelProto> model_;
  RuntimeSessionOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnx_light::core::runtime
