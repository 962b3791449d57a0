// runtime.PagedFormat, runtime.PagedFormatPolicy and RuntimeContext.register_paged_attention:
// choosing the page formats of ai.rt::PagedAttention from Python. The kernel is built in
// (dense FLOAT pages without registration); registering it on a context with a policy makes
// that context's sessions append pages in the policy's formats.
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "executor/runtime_context.h"
#include "ops/ai_rt/paged_attention.h"
#include "python/bindings/convert.h"
#include "python/bindings/registration.h"
#include "python/bindings/session.h"

namespace onnx_light::python {

using core::runtime::KernelBase;
using core::runtime::KernelInfo;
using core::runtime::RuntimeContext;
using core::runtime::Tensor;
using onnx_kernels::kernel::PagedAttention;

namespace {

TensorProto::DataType StorageFromName(const std::string& name) {
  for (int t = 1; t <= 26; ++t)
    if (core::IsKnownDataType(t) && core::DataTypeName(static_cast<core::DataType>(t)) == name)
      return static_cast<TensorProto::DataType>(t);
  throw py::value_error("unknown page storage type '" + name +
                        "' (FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT4, UINT4, INT2, UINT2)");
}

// A PagedFormat, a storage name ("INT8") or a tuple (storage, scale, zero_point).
PagedAttention::Format FormatFromPython(py::handle obj) {
  if (py::isinstance<PagedAttention::Format>(obj)) return obj.cast<PagedAttention::Format>();
  if (py::isinstance<py::str>(obj)) return {StorageFromName(obj.cast<std::string>()), 1.0f, 0};
  if (py::isinstance<py::tuple>(obj) && py::len(obj) == 3) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(obj);
    return {StorageFromName(t[0].cast<std::string>()), t[1].cast<float>(), t[2].cast<int32_t>()};
  }
  throw py::type_error(
      "a page format is a PagedFormat, a storage name or a tuple "
      "(storage, scale, zero_point), got " +
      std::string(py::str(obj.get_type().attr("__name__"))));
}

// "INT8 keys and UINT4 values once the cache holds `after_tokens` tokens" (dense FLOAT before).
struct FormatPolicy {
  PagedAttention::Format key, value;
  int64_t after_tokens = 0;
};

PagedAttention::FormatSelector SelectorFromPython(py::object policy) {
  if (policy.is_none()) return nullptr;
  if (py::isinstance<FormatPolicy>(policy)) {
    const FormatPolicy p = policy.cast<FormatPolicy>();
    return [p](const Tensor&, const Tensor&, int64_t past_length) {
      if (past_length < p.after_tokens) return PagedAttention::Formats{};
      return PagedAttention::Formats{p.key, p.value};
    };
  }
  if (!PyCallable_Check(policy.ptr()))
    throw py::type_error(
        "policy must be None, a PagedFormatPolicy or a callable "
        "(key, value, past_length) -> (key_format, value_format)");
  auto fn = SharedCallable(std::move(policy));
  return [fn](const Tensor& key, const Tensor& value, int64_t past_length) {
    py::gil_scoped_acquire gil;
    try {
      py::object result = (*fn)(TensorToPython(key), TensorToPython(value), past_length);
      if (!py::isinstance<py::tuple>(result) || py::len(result) != 2)
        throw core::Error(core::ErrorCode::kTypeError,
                          "the page format policy must return (key_format, value_format)");
      py::tuple t = result;
      return PagedAttention::Formats{FormatFromPython(t[0]), FormatFromPython(t[1])};
    } catch (py::error_already_set& e) {
      throw core::Error(e.matches(PyExc_TypeError) ? core::ErrorCode::kTypeError
                                                   : core::ErrorCode::kInvalidArgument,
                        std::string("page format policy: ") + e.what());
    }
  };
}

// The page storage a policy writes every page in, for KV budgets in bytes: a
// PagedFormatPolicy's formats from the first token; none (the declared layout) for None
// (dense FLOAT), a later switch (pages before it are FLOAT) or a callable.
std::optional<core::runtime::KvPageStorage> FixedStorage(py::handle policy) {
  if (!py::isinstance<FormatPolicy>(policy)) return std::nullopt;
  const FormatPolicy p = policy.cast<FormatPolicy>();
  if (p.after_tokens > 0) return std::nullopt;
  return core::runtime::KvPageStorage{p.key.storage, p.value.storage};
}

}  // namespace

void RegisterPaged(py::module_& runtime) {
  py::class_<PagedAttention::Format>(runtime, "PagedFormat",
                                     "The payload format of new cache pages: dense FLOAT, "
                                     "FLOAT16, BFLOAT16, or affine INT8/UINT8/INT4/UINT4/INT2/"
                                     "UINT2 codes with a scalar scale and zero point.")
      .def(py::init([](const std::string& storage, float scale, int32_t zero_point) {
             return PagedAttention::Format{StorageFromName(storage), scale, zero_point};
           }),
           py::arg("storage") = "FLOAT", py::arg("scale") = 1.0f, py::arg("zero_point") = 0)
      .def_property_readonly("storage",
                             [](const PagedAttention::Format& f) {
                               return core::DataTypeName(static_cast<core::DataType>(f.storage));
                             })
      .def_readonly("scale", &PagedAttention::Format::scale)
      .def_readonly("zero_point", &PagedAttention::Format::zero_point)
      .def("__repr__", [](const PagedAttention::Format& f) {
        return "PagedFormat('" + core::DataTypeName(static_cast<core::DataType>(f.storage)) +
               "', scale=" + std::to_string(f.scale) +
               ", zero_point=" + std::to_string(f.zero_point) + ")";
      });

  py::class_<FormatPolicy>(runtime, "PagedFormatPolicy",
                           "Pages appended once the cache holds `after_tokens` tokens use "
                           "`key`/`value` formats; earlier ones are dense FLOAT.")
      .def(py::init([](py::object key, py::object value, int64_t after_tokens) {
             if (after_tokens < 0) throw py::value_error("after_tokens must be >= 0");
             return FormatPolicy{FormatFromPython(key), FormatFromPython(value), after_tokens};
           }),
           py::arg("key"), py::arg("value"), py::arg("after_tokens") = 0)
      .def_readonly("key", &FormatPolicy::key)
      .def_readonly("value", &FormatPolicy::value)
      .def_readonly("after_tokens", &FormatPolicy::after_tokens);

  auto context =
      py::reinterpret_borrow<py::class_<RuntimeContext, std::shared_ptr<RuntimeContext>>>(
          runtime.attr("RuntimeContext"));
  context.def(
      "register_paged_attention",
      [](RuntimeContext& ctx, py::object policy) {
        ctx.set_kv_page_storage(FixedStorage(policy));
        auto select = SelectorFromPython(std::move(policy));
        ctx.RegisterKernelFn(
            "ai.rt", "PagedAttention", core::symbolic::Device::kCPU,
            [select](const NodeProto& node, RuntimeContext& rt) -> std::unique_ptr<KernelBase> {
              auto kernel = std::make_unique<PagedAttention>(rt.kernel_ctx(), select);
              kernel->set_node(node);
              return kernel;
            });
      },
      py::arg("policy") = py::none(),
      "Registers ai.rt::PagedAttention on this context with a page format policy: None "
      "(dense FLOAT, as the built-in kernel), a PagedFormatPolicy, or a callable "
      "policy(key, value, past_length) -> (key_format, value_format) called on every "
      "execution with the GIL held (formats: PagedFormat, a storage name or a tuple "
      "(storage, scale, zero_point)). A PagedFormatPolicy with after_tokens=0 also sets what "
      "a RequestScheduler's max_kv_bytes charges a token: the policy's storage sizes instead "
      "of the model's declared layout (other policies are charged at the declared layout).");
}

}  // namespace onnx_light::python
