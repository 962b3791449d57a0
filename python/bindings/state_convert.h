// Python <-> RuntimeValue for persistent state, guided by the model's declarations: dicts are
// named structs (complete), lists are typed sequences, EncodedValueProto objects are encoded
// values whose parameter_ref resolves in the model's shared parameters (one catalogue per
// input dictionary), anything else is a tensor (convert.h: NumPy, DLPack, runtime.Tensor).
// Tuples and other iterables are rejected rather than guessed. No payload is copied.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>

#include "core/runtime_value.h"

namespace onnx_light {
class ModelProto;
class TypeProto;
}  // namespace onnx_light

namespace onnx_light::python {

namespace py = pybind11;

class StateConverter {
 public:
  // `model` must stay alive while converted values are in use (held by the state).
  explicit StateConverter(std::shared_ptr<const ModelProto> model) : model_(std::move(model)) {}

  // Converts one dictionary (initial values or feeds): `declared_of(name)` gives the
  // declaration used for nested values (null when unknown).
  core::runtime::RuntimeValueMap MapFromPython(
      py::handle dict, const char* what,
      const std::function<const TypeProto*(const std::string&)>& declared_of) const;
  // `depth`: how many dicts/lists enclose `obj`; past kMaxNesting it throws (a
  // self-referential or absurdly deep value would otherwise overflow the C++ stack).
  core::runtime::RuntimeValue FromPython(
      py::handle obj, const std::string& path, const TypeProto* declared,
      std::shared_ptr<const core::runtime::ParameterCatalogue>& catalogue, int depth = 0) const;
  static constexpr int kMaxNesting = 64;

 private:
  std::shared_ptr<const core::runtime::ParameterCatalogue> Catalogue() const;

  std::shared_ptr<const ModelProto> model_;
};

}  // namespace onnx_light::python
