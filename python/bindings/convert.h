// Python <-> runtime value conversions shared by the bindings (sessions, state, generation).
// Tensors cross without copying their payload: NumPy arrays directly (contiguous, aligned,
// native-order built-in dtypes: no buffer export) or through the buffer protocol, and
// DLPack producers (PyTorch, ...) through __dlpack__ are borrowed and kept alive by the
// tensor's owner; runtime tensors go back to Python as runtime.Tensor objects sharing the
// owner. Noncontiguous, byte-swapped or unsupported inputs raise ValueError naming the input
// instead of being copied. String arrays are the one materialized case (std::string storage).
//
// Threading: the owner of a borrowed NumPy buffer takes the GIL when its last handle dies,
// which may happen on a worker thread. Callers that wait for kernels must release the GIL
// (py::gil_scoped_release) while they wait, as every run binding does.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/runtime_value.h"
#include "core/tensor.h"

namespace onnx_light::python {

namespace py = pybind11;

// A runtime Tensor named `name` viewing `obj` (runtime.Tensor, NumPy array or anything with
// __dlpack__ on the CPU). Throws core::Error (ValueError/TypeError in Python).
core::runtime::Tensor TensorFromPython(py::handle obj, const std::string& name);
// TensorFromPython's fast path: a plain NumPy array of a built-in numeric or boolean dtype,
// borrowed; nullopt for anything else (the caller tries its other conversions).
std::optional<core::runtime::Tensor> PlainArrayToTensor(py::handle obj, const std::string& name);
// A runtime.Tensor object sharing `tensor`'s owner.
py::object TensorToPython(const core::runtime::Tensor& tensor);

// RuntimeValue conversions without declarations (defined in state_convert.cc): dicts are
// structs, lists are sequences, EncodedValueProto/PagedCacheProto messages are encoded values
// and paged caches, anything else a tensor; the reverse maps paged-cache structures back to
// PagedCacheProto. No payload is copied, except that a paged cache written to a
// PagedCacheProto carries its page bytes (a serialization).
core::runtime::RuntimeValue ValueFromPython(py::handle obj, const std::string& name);
py::object ValueToPython(const core::runtime::RuntimeValue& value);

// `obj` cast to T, or a TypeError naming the argument and the type it needs: pybind11's own
// cast error ("Unable to cast Python instance to C++ type") names neither.
template <typename T>
T CastArgument(py::handle obj, const char* argument, const char* expected) {
  try {
    return obj.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(argument) + " must be " + expected + ", got " +
                         py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  }
}

}  // namespace onnx_light::python
