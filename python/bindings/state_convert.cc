#include "python/bindings/state_convert.h"

#include <optional>
#include <vector>

#include "core/error.h"
#include "core/type_compat.h"
#include "onnx_light.pb.h"
#include "python/bindings/convert.h"
#include "python/bindings/proto_wrapper.h"

namespace onnx_light::python {

using core::ErrorCode;
using core::runtime::ParameterCatalogue;
using core::runtime::RuntimeSequence;
using core::runtime::RuntimeValue;
using core::runtime::RuntimeValueMap;

namespace {

std::string TypeName(py::handle obj) { return py::str(py::type::of(obj).attr("__name__")); }

bool IsMessage(py::handle obj, const pb::Descriptor* descriptor) {
  py::handle cls = MessageClass(descriptor);
  return cls && py::isinstance(obj, cls);
}

}  // namespace

std::shared_ptr<const ParameterCatalogue> StateConverter::Catalogue() const {
  if (model_ == nullptr) return std::make_shared<ParameterCatalogue>();  // no model: empty
  return ParameterCatalogue::FromModel(model_);
}

RuntimeValue StateConverter::FromPython(py::handle obj, const std::string& path,
                                        const TypeProto* declared,
                                        std::shared_ptr<const ParameterCatalogue>& catalogue,
                                        int depth) const {
  if (depth > kMaxNesting)
    core::Throw(ErrorCode::kInvalidArgument,
                "'" + path.substr(0, 200) + "...': dicts/lists nest more than " +
                    std::to_string(kMaxNesting) + " levels deep (is the value self-referential?)");
  // The common case first: a NumPy array, before the probes for dicts, lists and messages.
  if (std::optional<core::runtime::Tensor> plain = PlainArrayToTensor(obj, path))
    return RuntimeValue(std::move(*plain));
  if (py::isinstance<py::dict>(obj)) {
    const StructTypeProto* s = nullptr;
    if (declared != nullptr && declared->has_struct_type())
      s = core::FindStruct(declared->struct_type(), model_.get());  // null: the state reports it
    std::vector<RuntimeValue::Field> fields;
    for (auto item : py::reinterpret_borrow<py::dict>(obj)) {
      if (!py::isinstance<py::str>(item.first))
        core::Throw(
            ErrorCode::kTypeError,
            "'" + path + "': struct field names must be strings, got " + TypeName(item.first));
      const std::string name = item.first.cast<std::string>();
      const TypeProto* field_type = nullptr;
      if (s != nullptr && s->field_size() > 0) {
        for (const auto& f : s->field())
          if (f.name() == name) field_type = &f.type();
        if (field_type == nullptr)
          core::Throw(ErrorCode::kInvalidArgument, "'" + path + "': unknown field '" + name +
                                                       "' for struct '" + s->name() + "'");
      }
      fields.emplace_back(
          name, FromPython(item.second, path + "." + name, field_type, catalogue, depth + 1));
    }
    if (s != nullptr)
      for (const auto& f : s->field()) {
        bool present = false;
        for (const auto& [name, value] : fields) present |= name == f.name();
        if (!present)
          core::Throw(ErrorCode::kInvalidArgument,
                      "'" + path + "': missing field '" + f.name() +
                          "' (nested dictionaries are complete values, not partial feeds)");
      }
    return RuntimeValue::Struct(s != nullptr ? s->name() : std::string(), std::move(fields));
  }
  if (py::isinstance<py::list>(obj)) {
    const TypeProto* elem = nullptr;
    std::shared_ptr<const TypeProto> elem_handle;
    if (declared != nullptr && declared->has_sequence_type()) {
      elem = &declared->sequence_type().elem_type();
      elem_handle = std::shared_ptr<const TypeProto>(model_, elem);
    }
    std::vector<RuntimeValue> values;
    size_t i = 0;
    for (auto item : py::reinterpret_borrow<py::list>(obj))
      values.push_back(
          FromPython(item, path + "[" + std::to_string(i++) + "]", elem, catalogue, depth + 1));
    return RuntimeValue::Sequence(RuntimeSequence::FromValues(std::move(values)),
                                  std::move(elem_handle));
  }
  if (IsMessage(obj, PagedCacheProto::descriptor())) {
    // Dense raw pages borrow from the message (it is kept alive); it must not be edited
    // while the state retains it, like every retained payload.
    if (catalogue == nullptr) catalogue = Catalogue();
    return RuntimeValue::FromPagedCache(ProtoFromPython<PagedCacheProto>(obj, path.c_str()),
                                        catalogue);
  }
  if (IsMessage(obj, EncodedValueProto::descriptor())) {
    auto encoded = ProtoFromPython<EncodedValueProto>(obj, path.c_str());
    if (!encoded->parameter_ref().empty()) {
      if (catalogue == nullptr) catalogue = Catalogue();
      if (!catalogue->entries.count(encoded->parameter_ref()))
        core::Throw(ErrorCode::kInvalidArgument,
                    "'" + path + "': parameter_ref '" + encoded->parameter_ref() +
                        "' names no shared parameter of the state's model");
    }
    return RuntimeValue::Encoded(std::move(encoded), catalogue);
  }
  if (py::isinstance<py::tuple>(obj) ||
      (!PyObject_CheckBuffer(obj.ptr()) && !py::hasattr(obj, "__dlpack__") &&
       py::hasattr(obj, "__iter__") && !py::isinstance<py::str>(obj)))
    core::Throw(ErrorCode::kTypeError,
                "'" + path + "': a " + TypeName(obj) +
                    " is not a sequence input; pass a list (tuples and other iterables are "
                    "not converted)");
  return RuntimeValue(TensorFromPython(obj, path));
}

RuntimeValueMap StateConverter::MapFromPython(
    py::handle dict, const char* what,
    const std::function<const TypeProto*(const std::string&)>& declared_of) const {
  if (dict.is_none()) return {};
  if (!py::isinstance<py::dict>(dict))
    core::Throw(ErrorCode::kTypeError,
                std::string(what) + " must be a dict of graph input names, got " + TypeName(dict));
  RuntimeValueMap out;
  std::shared_ptr<const ParameterCatalogue> catalogue;  // one per dictionary
  for (auto item : py::reinterpret_borrow<py::dict>(dict)) {
    if (!py::isinstance<py::str>(item.first))
      core::Throw(ErrorCode::kTypeError, std::string(what) + " keys must be strings");
    const std::string name = item.first.cast<std::string>();
    out[name] = FromPython(item.second, name, declared_of(name), catalogue);
  }
  return out;
}

RuntimeValue ValueFromPython(py::handle obj, const std::string& name) {
  std::shared_ptr<const ParameterCatalogue> catalogue;
  return StateConverter(nullptr).FromPython(obj, name, nullptr, catalogue);
}

py::object ValueToPython(const RuntimeValue& value) {
  switch (value.kind()) {
    case RuntimeValue::Kind::kTensor:
      return TensorToPython(value.tensor());
    case RuntimeValue::Kind::kStruct: {
      // Recognized by structure (no origin marker): a serialization, so page bytes are
      // written into the message.
      if (core::runtime::IsPagedCacheStructure(value))
        return MessageToPython(std::make_shared<PagedCacheProto>(value.ToPagedCache()));
      py::dict d;
      for (const auto& [name, field] : value.fields()) d[py::str(name)] = ValueToPython(field);
      return d;
    }
    case RuntimeValue::Kind::kSequence: {
      py::list l;
      const RuntimeSequence& seq = value.elements();
      for (size_t i = 0; i < seq.size(); ++i) l.append(ValueToPython(seq[i]));
      return l;
    }
    case RuntimeValue::Kind::kEncoded:
      // Shared, not copied: the payload is read only like every retained value.
      return MessageToPython(std::const_pointer_cast<EncodedValueProto>(value.encoded_ptr()));
    case RuntimeValue::Kind::kEmpty:
      break;
  }
  return py::none();
}

}  // namespace onnx_light::python
