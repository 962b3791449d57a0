// runtime.GenerationOptions and runtime.generate (spec "Autoregressive generation").
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "onnx_light.pb.h"
#include "python/bindings/convert.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"
#include "python/bindings/session.h"
#include "state/generate.h"
#include "state/task_completion.h"

namespace onnx_light::python {

using core::runtime::GenerationOptions;
using core::runtime::RuntimeContext;
using core::runtime::RuntimeSessionOptions;
using core::runtime::RuntimeValueMap;
using core::runtime::TaskCompletion;

namespace {

GenerationOptions OptionsFromKwargs(const py::kwargs& kwargs) {
  GenerationOptions o;
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::cast<std::string>(key);
    if (name == "max_new_tokens")
      o.max_new_tokens = py::cast<int64_t>(value);
    else if (name == "temperature")
      o.temperature = py::cast<float>(value);
    else if (name == "seed")
      o.seed = value.is_none() ? std::nullopt : std::optional<uint64_t>(py::cast<uint64_t>(value));
    else if (name == "eos_token_id")
      o.eos_token_id =
          value.is_none() ? std::nullopt : std::optional<int64_t>(py::cast<int64_t>(value));
    else if (name == "pad_token_id")
      o.pad_token_id =
          value.is_none() ? std::nullopt : std::optional<int64_t>(py::cast<int64_t>(value));
    else if (name == "top_k")
      o.top_k = py::cast<int64_t>(value);
    else if (name == "top_p")
      o.top_p = py::cast<float>(value);
    else if (name == "repetition_penalty")
      o.repetition_penalty = py::cast<float>(value);
    else if (name == "stop_token_ids")
      o.stop_token_ids = py::cast<std::vector<int64_t>>(value);
    else if (name == "prefill_chunk")
      o.prefill_chunk = py::cast<int64_t>(value);
    else if (name == "input_ids_name")
      o.input_ids_name = py::cast<std::string>(value);
    else if (name == "logits_name")
      o.logits_name = py::cast<std::string>(value);
    else if (name == "attention_mask_name")
      o.attention_mask_name = py::cast<std::string>(value);
    else if (name == "position_ids_name")
      o.position_ids_name = py::cast<std::string>(value);
    else
      throw py::type_error("GenerationOptions: unknown option '" + name + "'");
  }
  return o;
}

}  // namespace

void RegisterGeneration(py::module_& runtime) {
  py::class_<GenerationOptions>(runtime, "GenerationOptions",
                                "Options of runtime.generate; keyword arguments set fields.")
      .def(py::init([](const py::kwargs& kwargs) { return OptionsFromKwargs(kwargs); }))
      .def_readwrite("max_new_tokens", &GenerationOptions::max_new_tokens)
      .def_readwrite("temperature", &GenerationOptions::temperature)
      .def_readwrite("seed", &GenerationOptions::seed)
      .def_readwrite("eos_token_id", &GenerationOptions::eos_token_id)
      .def_readwrite("pad_token_id", &GenerationOptions::pad_token_id)
      .def_readwrite("top_k", &GenerationOptions::top_k)
      .def_readwrite("top_p", &GenerationOptions::top_p)
      .def_readwrite("repetition_penalty", &GenerationOptions::repetition_penalty)
      .def_readwrite("stop_token_ids", &GenerationOptions::stop_token_ids)
      .def_readwrite("prefill_chunk", &GenerationOptions::prefill_chunk)
      .def_readwrite("input_ids_name", &GenerationOptions::input_ids_name)
      .def_readwrite("logits_name", &GenerationOptions::logits_name)
      .def_readwrite("attention_mask_name", &GenerationOptions::attention_mask_name)
      .def_readwrite("position_ids_name", &GenerationOptions::position_ids_name);

  runtime.def(
      "generate",
      [](py::handle model_obj, RuntimeContext& context, const py::dict& feeds,
         std::optional<GenerationOptions> options,
         std::optional<RuntimeSessionOptions> session_options, py::object on_token,
         TaskCompletion* completion) -> py::object {
        // One session per model object (or the given runtime.RuntimeSession): repeated calls
        // do not plan the model or pack its weights again.
        std::shared_ptr<const core::runtime::RuntimeSession> session =
            SessionFromPython(model_obj, session_options);
        const ModelGuard guard = GuardFromPython(model_obj);
        RuntimeValueMap values;
        for (const auto& [key, value] : feeds) {
          const std::string name = py::cast<std::string>(key);
          values.emplace(name, ValueFromPython(value, name));
        }
        core::runtime::TokenCallback callback;
        if (!on_token.is_none()) {
          callback = [on_token](int64_t step, const std::vector<int64_t>& tokens) {
            py::gil_scoped_acquire gil;
            py::object keep_going = on_token(step, py::cast(tokens));
            return keep_going.is_none() || py::cast<bool>(keep_going);
          };
        }
        core::runtime::Tensor result;
        {
          ModelGuard::Reading reading(guard, "generate");
          py::gil_scoped_release release;
          result = core::runtime::Generate(std::move(session), context, std::move(values),
                                           options.value_or(GenerationOptions{}),
                                           std::move(callback), completion);
        }
        return TensorToPython(result);
      },
      py::arg("model"), py::arg("context"), py::arg("feeds"), py::arg("options") = py::none(),
      py::arg("session_options") = py::none(), py::kw_only(), py::arg("on_token") = py::none(),
      py::arg("completion") = py::none(),
      "Generates tokens; returns an INT64 [batch, prompt + generated] runtime tensor. "
      "`model` is a model or a runtime.RuntimeSession; a model object is compiled once and "
      "its session reused by later calls (runtime.cached_session). on_token(step, tokens) is "
      "called after every step (return False to stop); a cancelled completion stops between "
      "tokens.");
}

}  // namespace onnx_light::python
