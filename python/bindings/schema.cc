// Operator schemas for Python (core/op_schema.h, core/type_inference.h):
// runtime.get_schema, runtime.check_model and runtime.infer_types. Models are accepted as
// onnx_light.onnx.ModelProto, serialized bytes or an `onnx` ModelProto; infer_types returns
// a new onnx_light.onnx.ModelProto and never modifies its argument.
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "core/checker.h"
#include "core/op_schema.h"
#include "core/type_inference.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {
namespace {

py::object AttributeValue(const AttributeProto& a) {
  switch (a.type()) {
    case AttributeProto::INT:
      return py::int_(a.i());
    case AttributeProto::FLOAT:
      return py::float_(a.f());
    case AttributeProto::STRING:
      return py::bytes(a.s());
    case AttributeProto::INTS:
      return py::cast(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case AttributeProto::FLOATS:
      return py::cast(std::vector<float>(a.floats().begin(), a.floats().end()));
    default:
      return py::none();
  }
}

py::list Parameters(const std::vector<core::FormalParameter>& params) {
  py::list out;
  for (const auto& p : params) {
    py::dict d;
    d["name"] = p.name;
    d["kind"] = p.kind == core::FormalParameter::Kind::kPagedCache ? "paged_cache" : "tensor";
    // A paged cache that may also be a sequence of them, one per batch row.
    if (p.kind == core::FormalParameter::Kind::kPagedCache) d["batch_rows"] = p.batch_rows;
    d["optional"] = p.optional;
    py::list types;
    for (core::DataType t : p.types) types.append(core::DataTypeName(t));
    d["types"] = types;
    d["rank"] = p.rank ? py::object(py::int_(*p.rank)) : py::object(py::none());
    out.append(d);
  }
  return out;
}

py::object SchemaToPython(const core::LightOpSchema* s) {
  if (s == nullptr) return py::none();
  py::dict d;
  d["domain"] = s->domain();
  d["name"] = s->op_type();
  d["since_version"] = s->since_version();
  d["inputs"] = Parameters(s->inputs());
  d["outputs"] = Parameters(s->outputs());
  py::dict attributes;  // name -> default value (None: no default)
  for (const auto& a : s->attributes())
    attributes[py::str(a.name)] = a.default_value ? AttributeValue(*a.default_value) : py::none();
  d["attributes"] = attributes;
  return d;
}

}  // namespace

void RegisterSchema(py::module_& runtime) {
  runtime.def(
      "get_schema",
      [](const std::string& domain, const std::string& op_type, int64_t opset_version) {
        return SchemaToPython(core::LightSchemaRegistry::Get(domain, op_type, opset_version));
      },
      py::arg("domain"), py::arg("op_type"), py::arg("opset_version"),
      "The onnx-light schema in force for (domain, op_type) at the imported opset_version, as "
      "a dict (domain, name, since_version, inputs, outputs, attributes: name -> default), or "
      "None. A schema registers no kernel.");
  runtime.def(
      "check_model",
      [](py::handle model) { core::CheckModel(*ProtoFromPython<ModelProto>(model, "model")); },
      py::arg("model"),
      "Raises ValueError naming the node and field at fault when the model breaks a "
      "structural, binding or operator-schema rule.");
  runtime.def(
      "infer_types",
      [](py::handle model) {
        auto copy = std::make_shared<ModelProto>(*ProtoFromPython<ModelProto>(model, "model"));
        core::InferTypes(*copy);
        return MessageToPython(std::move(copy));
      },
      py::arg("model"),
      "A copy of the model in which every output of a schema'd node (e.g. ai.rt::PagedAttention) "
      "without a declaration has its inferred type (graph output or value_info); existing "
      "declarations are kept. Raises ValueError like check_model, and on a contradiction "
      "between an inferred and a declared type.");
}

}  // namespace onnx_light::python
