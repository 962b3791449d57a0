// runtime.KernelContext, runtime.default_opset, runtime.RuntimeContext (events, values,
// Python custom kernels), runtime.RuntimeSessionOptions, runtime.RuntimeSession and the
// session cache functions (runtime.cached_session, runtime.session_cache_*,
// runtime.packed_weight_bytes).
#include "python/bindings/session.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/fault_injection.h"
#include "executor/node_profile.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "executor/session_cache.h"
#include "onnx_light.pb.h"
#include "ops/math/constant_weight.h"
#include "ops/math/gemm.h"
#include "python/bindings/convert.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {

using core::runtime::KernelBase;
using core::runtime::KernelCall;
using core::runtime::KernelContext;
using core::runtime::KernelInfo;
using core::runtime::OpsetMap;
using core::runtime::RunOptions;
using core::runtime::RuntimeContext;
using core::runtime::RuntimeContextOptions;
using core::runtime::RuntimeEvent;
using core::runtime::RuntimeEventAction;
using core::runtime::RuntimeSession;
using core::runtime::RuntimeSessionOptions;
using core::runtime::RuntimeValue;
using core::runtime::RuntimeValueMap;
using core::runtime::SessionCache;

std::shared_ptr<py::object> SharedCallable(py::object fn) {
  return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

namespace {

// What runtime.KernelInfo shows a Python kernel: a copy of the C++ KernelInfo taken when the
// kernel is built (that one refers to the plan builder's data and dies with the factory call).
struct PythonKernelInfo {
  std::string node_name, op_type, domain;
  int64_t since_version;
  KernelContext opsets;  // in force where the node sits (a function body: its opset_import)

  explicit PythonKernelInfo(const KernelInfo& info)
      : node_name(info.node().name()),
        op_type(info.node().op_type()),
        domain(info.node().domain()),
        since_version(info.since_version()),
        opsets(info.kernel_ctx()) {}
};

// fn(context, inputs: list) -> list of outputs, or fn(context, inputs, info) when registered
// with_info (info: the node's runtime.KernelInfo); run with the GIL held.
class PythonKernel final : public KernelBase {
 public:
  PythonKernel(std::shared_ptr<py::object> fn, std::shared_ptr<PythonKernelInfo> info)
      : fn_(std::move(fn)), info_(std::move(info)) {}

  void Compute(KernelCall& call) const override {
    py::gil_scoped_acquire gil;
    try {
      py::list inputs;
      for (size_t i = 0; i < call.input_count(); ++i)
        inputs.append(call.has_input(i) ? ValueToPython(call.input_value(i)) : py::none());
      py::object context = py::cast(&call.context(), py::return_value_policy::reference);
      py::object result =
          info_ ? (*fn_)(context, inputs, py::cast(info_)) : (*fn_)(context, inputs);
      if (!py::isinstance<py::list>(result) && !py::isinstance<py::tuple>(result))
        call.Fail("the Python kernel must return a list of outputs, got " +
                  std::string(py::str(result.get_type().attr("__name__"))));
      py::sequence outputs = result;
      if (outputs.size() > call.output_count())
        call.Fail("the Python kernel returned " + std::to_string(outputs.size()) +
                  " outputs, the node has " + std::to_string(call.output_count()));
      for (size_t i = 0; i < outputs.size(); ++i) {
        py::object v = outputs[i];
        if (v.is_none()) continue;
        const std::string name = call.node().output(static_cast<int>(i));
        RuntimeValue value = ValueFromPython(v, name);
        if (value.is_tensor())
          call.SetOutput(i, std::move(value).TakeTensor());
        else
          call.SetOutputValue(i, std::move(value));
      }
    } catch (py::error_already_set& e) {
      // Converted while the GIL is held, so the Python exception is released here.
      core::ErrorCode code = core::ErrorCode::kRuntime;
      if (e.matches(PyExc_ValueError)) code = core::ErrorCode::kInvalidArgument;
      if (e.matches(PyExc_TypeError)) code = core::ErrorCode::kTypeError;
      throw core::Error(code, e.what());
    }
  }

 private:
  std::shared_ptr<py::object> fn_;
  std::shared_ptr<PythonKernelInfo> info_;  // null unless registered with_info
};

OpsetMap OpsetsFromPython(py::handle obj) {
  if (py::isinstance<py::bool_>(obj) ||
      !(py::isinstance<py::int_>(obj) || py::isinstance<py::dict>(obj)))
    throw py::type_error(
        "KernelContext expects an opset version (int) or a dict {domain: "
        "version}");
  if (py::isinstance<py::int_>(obj)) return core::runtime::default_opset(obj.cast<int64_t>());
  OpsetMap opsets;
  for (auto item : obj.cast<py::dict>())
    opsets[item.first.cast<std::string>()] = item.second.cast<int64_t>();
  return opsets;
}

py::dict OpsetsToPython(const KernelContext& k) {
  py::dict d;
  for (const auto& [domain, v] : k.opsets()) d[py::str(domain)] = v;
  return d;
}

// A nonnegative int option that fits size_t; `what` names it in errors.
size_t SizeFromPython(py::handle obj, const char* what) {
  if (py::isinstance<py::bool_>(obj) || !py::isinstance<py::int_>(obj))
    throw py::type_error(std::string(what) + " must be an int, got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  if (obj.cast<py::int_>() < py::int_(0))
    throw py::value_error(std::string(what) + " must be nonnegative, got " +
                          std::string(py::str(obj)));
  unsigned long long v = PyLong_AsUnsignedLongLong(obj.ptr());
  if (PyErr_Occurred() || v > SIZE_MAX) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " " + std::string(py::str(obj)) +
                          " does not fit in size_t");
  }
  return static_cast<size_t>(v);
}

size_t CapacityFromPython(py::handle obj) {
  return SizeFromPython(obj, "persistent_tensor_initial_capacity");
}

// 0 .. one second: a longer spin would hold a core through any pause of a run.
int SpinWaitFromPython(int us) {
  if (us < 0 || us > 1'000'000)
    throw py::value_error("spin_wait_us must be between 0 and 1000000, got " + std::to_string(us));
  return us;
}

const char* ExecutorName(RuntimeSessionOptions::ExecutorMode mode) {
  switch (mode) {
    case RuntimeSessionOptions::ExecutorMode::kInline:
      return "inline";
    case RuntimeSessionOptions::ExecutorMode::kFlowGraph:
      return "flow_graph";
    default:
      return "auto";
  }
}

RuntimeSessionOptions::ExecutorMode ExecutorFromName(const std::string& name) {
  if (name == "auto") return RuntimeSessionOptions::ExecutorMode::kAuto;
  if (name == "inline") return RuntimeSessionOptions::ExecutorMode::kInline;
  if (name == "flow_graph") return RuntimeSessionOptions::ExecutorMode::kFlowGraph;
  throw py::value_error("executor must be 'auto', 'inline' or 'flow_graph', got '" + name + "'");
}

py::dict OutputsToPython(const RuntimeValueMap& outputs) {
  py::dict result;
  for (auto& [name, value] : outputs) result[py::str(name)] = ValueToPython(value);
  return result;
}

std::optional<std::vector<std::string>> NamesFromPython(py::handle names) {
  if (names.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(names))
    throw py::type_error("output_names must be a list of output names, not a string");
  return CastArgument<std::vector<std::string>>(names, "output_names", "a list of str");
}

}  // namespace

std::shared_ptr<const RuntimeSession> SessionFromPython(
    py::handle model, const std::optional<RuntimeSessionOptions>& options) {
  if (py::isinstance<PySession>(model)) {
    if (options.has_value())
      throw py::value_error(
          "session_options cannot be given with a RuntimeSession: the session's own options "
          "apply (build the session with the options you need)");
    return model.cast<const PySession&>().session;
  }
  const RuntimeSessionOptions o = options.value_or(RuntimeSessionOptions{});
  std::shared_ptr<const ModelProto> m = ProtoFromPython<ModelProto>(model, "model");
  if (IsMessageObject(model)) return SessionCache::Default().Get(m, o, MessageVersion(model));
  return std::make_shared<RuntimeSession>(std::move(m), o);  // a parsed copy: nothing to key
}

ModelGuard GuardFromPython(py::handle model) {
  if (py::isinstance<PySession>(model)) return model.cast<const PySession&>().guard;
  return ModelGuard::Of(model);
}

void RegisterSession(py::module_& runtime) {
  runtime.def(
      "default_opset",
      [](int64_t version) {
        py::dict d;
        for (const auto& [domain, v] : core::runtime::default_opset(version))
          d[py::str(domain)] = v;
        return d;
      },
      py::arg("onnx_version") = 18, "The default operator sets {domain: version}.");
  runtime.def(
      "allocator_stats",
      [] {
        const auto& heap = core::runtime::DefaultAllocator();
        py::dict d;
        d["live_bytes"] = heap.live_bytes();
        d["peak_bytes"] = heap.peak_bytes();
        d["cached_bytes"] = heap.cached_bytes();
        d["system_allocations"] = heap.system_allocations();
        d["large_reuses"] = heap.large_reuses();
        d["packed_weight_bytes"] = ops::math::PackedWeightBytes();
        d["weight_packs"] = ops::math::BPacksForTesting();
        return d;
      },
      "Counters of the process-wide heap allocator and of the kept weight packs: live, peak "
      "and cached bytes; blocks taken from the system (only these page-fault fresh memory "
      "in); large-block reuses; bytes of packed constant weights and how many times a weight "
      "was packed.");
  runtime.def(
      "arm_fault",
      [](const std::string& site, int64_t index) {
        namespace fi = core::fault_injection;
        if (site == "allocation") return fi::Arm(core::FaultSite::kAllocation, index);
        if (site == "node") return fi::Arm(core::FaultSite::kNode, index);
        throw py::value_error("arm_fault: site must be 'allocation' or 'node', not '" + site + "'");
      },
      py::arg("site"), py::arg("index"),
      "Testing hook: the `index`-th (0-based) allocation of the runtime's allocators (site "
      "'allocation': it raises MemoryError naming the node) or the `index`-th node to start "
      "(site 'node': RuntimeError 'injected fault') fails once from now, in any session; a "
      "negative index only counts. Process-wide: for tests of failure handling only.");
  runtime.def("disarm_fault", &core::fault_injection::Disarm,
              "Testing hook: no injected fault anywhere; the sites stop counting.");
  runtime.def(
      "fault_count",
      [](const std::string& site) {
        if (site == "allocation") return core::fault_injection::Count(core::FaultSite::kAllocation);
        if (site == "node") return core::fault_injection::Count(core::FaultSite::kNode);
        throw py::value_error("fault_count: site must be 'allocation' or 'node', not '" + site +
                              "'");
      },
      py::arg("site"), "Testing hook: events seen at `site` since arm_fault armed it.");

  py::class_<KernelContext>(runtime, "KernelContext",
                            "The operator sets in force: an ONNX opset version or a dict "
                            "{domain: version}.")
      .def(py::init([](py::object opsets) { return KernelContext(OpsetsFromPython(opsets)); }),
           py::arg("opsets") = 18)
      .def("opset", &KernelContext::opset, py::arg("domain"),
           "The version of `domain` (0 when not imported).")
      .def_property_readonly("opsets", &OpsetsToPython);

  py::class_<PythonKernelInfo, std::shared_ptr<PythonKernelInfo>>(
      runtime, "KernelInfo",
      "What a kernel is built from, given to a Python kernel registered with_info=True: the "
      "node, the since-version of the kernel chosen for it and the opsets in force where it "
      "sits (the model's opset_import; in a model-local function's body, the function's "
      "own), never the caller's KernelContext defaults.")
      .def_readonly("node_name", &PythonKernelInfo::node_name)
      .def_readonly("op_type", &PythonKernelInfo::op_type)
      .def_readonly("domain", &PythonKernelInfo::domain)
      .def_readonly("since_version", &PythonKernelInfo::since_version)
      .def(
          "opset",
          [](const PythonKernelInfo& i, const std::string& d) { return i.opsets.opset(d); },
          py::arg("domain"), "The version of `domain` in force for the node (0 when not imported).")
      .def_property_readonly(
          "node_opset", [](const PythonKernelInfo& i) { return i.opsets.opset(i.domain); },
          "The version of the node's own domain in force for the node.")
      .def_property_readonly(
          "opsets", [](const PythonKernelInfo& i) { return OpsetsToPython(i.opsets); },
          "{domain: version} in force for the node.")
      .def("__repr__", [](const PythonKernelInfo& i) {
        return "KernelInfo(" + (i.domain.empty() ? std::string() : i.domain + ".") + i.op_type +
               ", node='" + i.node_name + "', opset=" + std::to_string(i.opsets.opset(i.domain)) +
               ")";
      });

  py::enum_<RuntimeEventAction>(runtime, "RuntimeEventAction")
      .value("kKernel", RuntimeEventAction::kKernel)
      .value("kPersistentStorage", RuntimeEventAction::kPersistentStorage)
      .value("kSubgraph", RuntimeEventAction::kSubgraph)
      .value("kFunction", RuntimeEventAction::kFunction);

  py::class_<RuntimeEvent>(runtime, "RuntimeEvent")
      .def_readonly("action", &RuntimeEvent::action)
      .def_readonly("node_name", &RuntimeEvent::node_name)
      .def_readonly("op_type", &RuntimeEvent::op_type)
      .def_readonly("allocated_bytes", &RuntimeEvent::allocated_bytes)
      .def_readonly("peak_bytes", &RuntimeEvent::peak_bytes)
      .def_readonly("storage_allocations", &RuntimeEvent::storage_allocations)
      .def_readonly("storage_allocated_bytes", &RuntimeEvent::storage_allocated_bytes)
      .def_readonly("storage_prefix_copied_bytes", &RuntimeEvent::storage_prefix_copied_bytes)
      .def_readonly("storage_append_copied_bytes", &RuntimeEvent::storage_append_copied_bytes)
      .def_readonly("storage_reuse_count", &RuntimeEvent::storage_reuse_count)
      .def_readonly("duration_ns", &RuntimeEvent::duration_ns)
      .def("__repr__", [](const RuntimeEvent& e) {
        return std::string("RuntimeEvent(") + core::runtime::RuntimeEventActionName(e.action) +
               ", node='" + e.node_name + "', op='" + e.op_type + "')";
      });

  py::class_<RuntimeContext, std::shared_ptr<RuntimeContext>>(
      runtime, "RuntimeContext",
      "Opsets, custom kernels and the event log, configured once and reused by many calls. "
      "Each call runs in a fresh child context.")
      .def(py::init([](const KernelContext& kernel_ctx, bool events_enabled) {
             return std::make_shared<RuntimeContext>(
                 kernel_ctx, RuntimeContextOptions{.events_enabled = events_enabled});
           }),
           py::arg("kernel_ctx") = KernelContext(18), py::kw_only(),
           py::arg("events_enabled") = false)
      .def_property_readonly("kernel_ctx", &RuntimeContext::kernel_ctx)
      .def_property_readonly("events_enabled", &RuntimeContext::events_enabled)
      .def(
          "register_kernel",
          [](RuntimeContext& ctx, const std::string& domain, const std::string& op_type,
             py::function fn, int64_t since_version, bool with_info) {
            auto shared = SharedCallable(std::move(fn));
            ctx.RegisterKernelFn(
                domain, op_type, core::symbolic::Device::kCPU,
                [shared, with_info](const NodeProto& node, RuntimeContext&,
                                    const KernelInfo& info) -> std::unique_ptr<KernelBase> {
                  auto kernel = std::make_unique<PythonKernel>(
                      shared, with_info ? std::make_shared<PythonKernelInfo>(info) : nullptr);
                  kernel->set_node(node);
                  return kernel;
                },
                since_version);
          },
          py::arg("domain"), py::arg("op_type"), py::arg("fn"), py::arg("since_version") = 1,
          py::kw_only(), py::arg("with_info") = false,
          "Registers fn(context, inputs: list) -> list of outputs for domain::op_type; with "
          "with_info=True, fn(context, inputs, info) where info is the node's "
          "runtime.KernelInfo (its since-version and the opsets in force where it sits, as C++ "
          "kernels get them). It runs with the GIL held; `context` is the call's child context, "
          "valid during the call.")
      .def(
          "get_value",
          [](const RuntimeContext& ctx, const std::string& name) {
            return ValueToPython(ctx.get_value(name));
          },
          py::arg("name"))
      .def(
          "put_value",
          [](RuntimeContext& ctx, const std::string& name, py::handle value) {
            ctx.put_value(name, ValueFromPython(value, name));
          },
          py::arg("name"), py::arg("value"))
      .def("has_value", &RuntimeContext::has_value, py::arg("name"))
      .def("events", &RuntimeContext::events, "A snapshot of the shared event log.")
      .def("clear_events", &RuntimeContext::ClearEvents)
      .def("ClearEvents", &RuntimeContext::ClearEvents);

  py::class_<RuntimeSessionOptions>(runtime, "RuntimeSessionOptions")
      .def(py::init([](int intra_op_threads, py::object capacity, const std::string& executor,
                       bool fold_constants, bool fuse_subgraphs, py::object max_tensor_bytes,
                       bool profile, int dequantize_matmul_accuracy_level, py::object max_run_bytes,
                       int spin_wait_us) {
             if (intra_op_threads < 0)
               throw py::value_error("intra_op_threads must be >= 0, got " +
                                     std::to_string(intra_op_threads));
             RuntimeSessionOptions o;
             o.intra_op_threads = intra_op_threads;
             o.persistent_tensor_initial_capacity = CapacityFromPython(capacity);
             o.executor = ExecutorFromName(executor);
             o.fold_constants = fold_constants;
             o.fuse_subgraphs = fuse_subgraphs;
             if (!max_tensor_bytes.is_none())
               o.max_tensor_bytes = SizeFromPython(max_tensor_bytes, "max_tensor_bytes");
             if (!max_run_bytes.is_none())
               o.max_run_bytes = SizeFromPython(max_run_bytes, "max_run_bytes");
             o.profile = profile;
             o.dequantize_matmul_accuracy_level = dequantize_matmul_accuracy_level;
             o.spin_wait_us = SpinWaitFromPython(spin_wait_us);
             return o;
           }),
           py::kw_only(), py::arg("intra_op_threads") = 0,
           py::arg("persistent_tensor_initial_capacity") = 32, py::arg("executor") = "auto",
           py::arg("fold_constants") = true, py::arg("fuse_subgraphs") = true,
           py::arg("max_tensor_bytes") = py::none(), py::arg("profile") = false,
           py::arg("dequantize_matmul_accuracy_level") = 0, py::arg("max_run_bytes") = py::none(),
           py::arg("spin_wait_us") = RuntimeSessionOptions{}.spin_wait_us,
           "max_tensor_bytes: the largest tensor one allocation of a run may request (None: "
           "half the physical memory; 0: unlimited); a larger one raises MemoryError naming "
           "the node and the size. max_run_bytes: the most bytes one run may hold allocated "
           "at once (None or 0: unlimited); an allocation past it raises MemoryError naming "
           "the node, the size and the limit, and a state publishes nothing. profile: time "
           "every node of every run; the session's (or state's) profile() gives the totals, "
           "onnx_light.profiling.profile_table a table. "
           "dequantize_matmul_accuracy_level: 0 computes MatMul(A, DequantizeLinear(W)) "
           "exactly in float; 4 quantizes A to int8 per 32 values, as onnxruntime does. "
           "spin_wait_us: in an inline run with several threads, how long the other threads "
           "spin for the next parallel kernel before sleeping (default 1000; a thread that "
           "finds its core wanted elsewhere stops spinning, and runs do not spin for 200 ms; "
           "0: sleep at once).")
      .def_property(
          "spin_wait_us", [](const RuntimeSessionOptions& o) { return o.spin_wait_us; },
          [](RuntimeSessionOptions& o, int v) { o.spin_wait_us = SpinWaitFromPython(v); },
          "Microseconds an inline run's helper threads spin between parallel kernels.")
      .def_readwrite("profile", &RuntimeSessionOptions::profile,
                     "Time every node of every run (RuntimeSession.profile()).")
      .def_readwrite("dequantize_matmul_accuracy_level",
                     &RuntimeSessionOptions::dequantize_matmul_accuracy_level,
                     "0: MatMul(A, DequantizeLinear(W)) exactly in float; 4: A quantized to int8.")
      .def_property(
          "max_tensor_bytes", [](const RuntimeSessionOptions& o) { return o.max_tensor_bytes; },
          [](RuntimeSessionOptions& o, py::object v) {
            o.max_tensor_bytes = SizeFromPython(v, "max_tensor_bytes");
          })
      .def_property(
          "max_run_bytes", [](const RuntimeSessionOptions& o) { return o.max_run_bytes; },
          [](RuntimeSessionOptions& o, py::object v) {
            o.max_run_bytes = v.is_none() ? 0 : SizeFromPython(v, "max_run_bytes");
          },
          "Most bytes one run may hold allocated at once (0: unlimited).")
      .def_readwrite("fold_constants", &RuntimeSessionOptions::fold_constants,
                     "Evaluate constant-only subgraphs once, when the plan is built.")
      .def_readwrite("fuse_subgraphs", &RuntimeSessionOptions::fuse_subgraphs,
                     "Replace exported subgraphs (torch's decomposed attention) by fused "
                     "kernels when the plan is built.")
      .def_property(
          "intra_op_threads", [](const RuntimeSessionOptions& o) { return o.intra_op_threads; },
          [](RuntimeSessionOptions& o, int v) {
            if (v < 0)
              throw py::value_error("intra_op_threads must be >= 0, got " + std::to_string(v));
            o.intra_op_threads = v;
          })
      .def_property(
          "persistent_tensor_initial_capacity",
          [](const RuntimeSessionOptions& o) { return o.persistent_tensor_initial_capacity; },
          [](RuntimeSessionOptions& o, py::object v) {
            o.persistent_tensor_initial_capacity = CapacityFromPython(v);
          })
      .def_property(
          "executor", [](const RuntimeSessionOptions& o) { return ExecutorName(o.executor); },
          [](RuntimeSessionOptions& o, const std::string& v) { o.executor = ExecutorFromName(v); })
      .def("__repr__", [](const RuntimeSessionOptions& o) {
        return "RuntimeSessionOptions(intra_op_threads=" + std::to_string(o.intra_op_threads) +
               ", persistent_tensor_initial_capacity=" +
               std::to_string(o.persistent_tensor_initial_capacity) + ", executor='" +
               ExecutorName(o.executor) +
               "', fold_constants=" + (o.fold_constants ? "True" : "False") +
               ", fuse_subgraphs=" + (o.fuse_subgraphs ? "True" : "False") +
               ", max_tensor_bytes=" + std::to_string(o.max_tensor_bytes) +
               (o.max_run_bytes ? ", max_run_bytes=" + std::to_string(o.max_run_bytes) : "") +
               (o.profile ? ", profile=True" : "") +
               (o.dequantize_matmul_accuracy_level
                    ? ", dequantize_matmul_accuracy_level=" +
                          std::to_string(o.dequantize_matmul_accuracy_level)
                    : "") +
               ")";
      });

  py::class_<PySession, std::shared_ptr<PySession>>(
      runtime, "RuntimeSession",
      "The compiled model: plan, kernels, folded constants and packed weights, built once "
      "per context configuration on the first run and reused. Immutable and shareable: "
      "concurrent runs and many PersistentValueState(session, initial) use one session.")
      .def(py::init([](py::object model, std::optional<RuntimeSessionOptions> options) {
             std::shared_ptr<const ModelProto> m = ProtoFromPython<ModelProto>(model, "model");
             return std::make_shared<PySession>(
                 PySession{std::make_shared<RuntimeSession>(
                               std::move(m), options.value_or(RuntimeSessionOptions{})),
                           model, ModelGuard::Of(model)});
           }),
           py::arg("model"), py::arg("options") = py::none(),
           "A private session of `model` (runtime.cached_session gives the shared one).")
      .def(
          "run",
          [](const PySession& self, std::shared_ptr<RuntimeContext> context, py::dict feeds,
             py::object output_names, bool last_position_only) {
            RuntimeValueMap values;
            for (auto item : feeds) {
              const std::string name = py::str(item.first);
              values[name] = ValueFromPython(item.second, name);
            }
            std::optional<std::vector<std::string>> names = NamesFromPython(output_names);
            if (last_position_only && !names)
              throw py::value_error(
                  "last_position_only needs output_names: the outputs "
                  "wanted at the last position");
            RunOptions options;
            if (last_position_only) options.last_position_outputs = &*names;
            RuntimeValueMap outputs;
            {
              ModelGuard::Reading reading(self.guard, "RuntimeSession.run");
              py::gil_scoped_release release;
              outputs = names ? self.session->Run(*context, std::move(values), *names, options)
                              : self.session->Run(*context, std::move(values));
            }
            return OutputsToPython(outputs);
          },
          py::arg("context"), py::arg("feeds"), py::arg("output_names") = py::none(),
          py::arg("last_position_only") = false,
          "Runs the graph with `feeds` {input name: array/tensor} and returns {output name: "
          "runtime.Tensor} (only the outputs named in output_names when given; with "
          "last_position_only, those produced directly by a MatMul come back for the last "
          "row along axis -2 alone). The GIL is released while kernels run.")
      .def(
          "profile", [](const PySession& self) { return ProfileToPython(*self.session); },
          "{'runs': n, 'nodes': [{'node', 'op_type', 'calls', 'total_ms'}, ...]}: wall time "
          "per node over the session's runs, in the order nodes first ran (nested graphs' "
          "nodes count in their parent). Needs RuntimeSessionOptions(profile=True).")
      .def(
          "clear_profile", [](const PySession& self) { ProfilerOf(*self.session).Clear(); },
          "Forgets the runs profiled so far.")
      .def_property_readonly("options",
                             [](const PySession& self) { return self.session->options(); })
      .def_property_readonly(
          "model", [](const PySession& self) { return self.model; },
          "The model object the session was built from.")
      .def_property_readonly(
          "plan_count", [](const PySession& self) { return self.session->plan_count(); },
          "How many plans (one per non-equivalent context configuration) the session holds.")
      .def("__eq__",
           [](const PySession& a, py::handle b) {
             return py::isinstance<PySession>(b) && a.session == b.cast<const PySession&>().session;
           })
      .def("__hash__",
           [](const PySession& self) { return std::hash<const void*>()(self.session.get()); });

  runtime.def(
      "cached_session",
      [](py::object model, std::optional<RuntimeSessionOptions> options) {
        auto session = SessionFromPython(model, options);
        py::object model_object = model;
        if (py::isinstance<PySession>(model)) model_object = model.cast<const PySession&>().model;
        return std::make_shared<PySession>(
            PySession{std::move(session), model_object, GuardFromPython(model)});
      },
      py::arg("model"), py::arg("options") = py::none(),
      "The session runtime.generate, ReferenceEvaluator and RequestScheduler.submit use for "
      "`model`: one per model object and options (compiled again after the model is changed "
      "from Python); a private one for bytes or an onnx ModelProto. Equal (==) for the same "
      "compiled session.");
  runtime.def(
      "session_cache_size", [] { return SessionCache::Default().size(); },
      "How many sessions the process-wide cache holds.");
  runtime.def(
      "session_cache_sweep", [] { return SessionCache::Default().Sweep(); },
      py::call_guard<py::gil_scoped_release>(),
      "Drops the cached sessions whose model and session no one else holds; returns how many.");
  runtime.def(
      "session_cache_clear", [] { SessionCache::Default().Clear(); },
      py::call_guard<py::gil_scoped_release>(), "Drops every cached session.");
  runtime.def(
      "packed_weight_bytes", [] { return ops::math::PackedWeightBytes(); },
      "Bytes of the packed MatMul/Gemm weight copies all live kernels of the process hold.");
}

core::runtime::NodeProfile& ProfilerOf(const RuntimeSession& session) {
  if (session.profile() == nullptr)
    throw py::value_error(
        "profile: this session was built without "
        "RuntimeSessionOptions(profile=True)");
  return *session.profile();
}

py::dict ProfileToPython(const RuntimeSession& session) {
  const core::runtime::NodeProfile& profile = ProfilerOf(session);
  py::list nodes;
  for (const auto& row : profile.Rows()) {
    py::dict d;
    d["node"] = py::bytes(row.node_name).attr("decode")("utf-8", "replace");
    d["op_type"] = py::bytes(row.op_type).attr("decode")("utf-8", "replace");
    d["calls"] = row.calls;
    d["total_ms"] = static_cast<double>(row.total_ns) * 1e-6;
    nodes.append(std::move(d));
  }
  py::dict out;
  out["runs"] = profile.runs();
  out["nodes"] = std::move(nodes);
  return out;
}

}  // namespace onnx_light::python
