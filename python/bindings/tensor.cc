// runtime.Tensor: a runtime tensor seen from Python. Built from NumPy arrays or DLPack
// producers without copying (convert.cc); exported through __dlpack__ and the buffer protocol
// (read-only) sharing the same owner, so NumPy/PyTorch views of it are zero-copy too.
#include "core/tensor.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include "core/dlpack.h"
#include "core/error.h"
#include "python/bindings/convert.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {
namespace {

using core::DataType;
using core::ErrorCode;
using core::runtime::Tensor;

void DeleteCapsule(PyObject* capsule) {
  // A consumer that adopted the tensor renamed the capsule to "used_dltensor".
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

// PEP 3118 format of the elements; BFLOAT16 is exposed as its uint16 bits.
const char* BufferFormat(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat:
      return "f";
    case DataType::kDouble:
      return "d";
    case DataType::kFloat16:
      return "e";
    case DataType::kBFloat16:
      return "H";
    case DataType::kBool:
      return "?";
    case DataType::kInt8:
      return "b";
    case DataType::kUint8:
      return "B";
    case DataType::kInt16:
      return "h";
    case DataType::kUint16:
      return "H";
    case DataType::kInt32:
      return "i";
    case DataType::kUint32:
      return "I";
    case DataType::kInt64:
      return "q";
    case DataType::kUint64:
      return "Q";
    default:
      return nullptr;
  }
}

py::object NumpyDtype(DataType dtype) {
  py::module_ np = py::module_::import("numpy");
  if (dtype == DataType::kString) return np.attr("dtype")("O");
  if (dtype == DataType::kBFloat16)
    return np.attr("dtype")(py::module_::import("ml_dtypes").attr("bfloat16"));
  const char* format = BufferFormat(dtype);
  OL_CHECK(format != nullptr, ErrorCode::kNotImplemented,
           core::DataTypeName(dtype) + " tensors have no NumPy dtype");
  return np.attr("dtype")(format);
}

std::vector<py::ssize_t> ByteStrides(const Tensor& t, size_t itemsize) {
  std::vector<py::ssize_t> strides;
  for (int64_t s : t.strides())
    strides.push_back(static_cast<py::ssize_t>(s * static_cast<int64_t>(itemsize)));
  return strides;
}

py::object ToNumpy(py::handle self) {
  const Tensor& t = self.cast<const Tensor&>();
  py::module_ np = py::module_::import("numpy");
  if (t.dtype() == DataType::kString) {
    py::list items;
    for (const std::string& s : t.strings()) items.append(py::str(s));
    py::object array = np.attr("array")(items, py::arg("dtype") = "O");
    return array.attr("reshape")(py::cast(t.shape()));
  }
  // Through the read-only buffer protocol: the array's base keeps this Tensor alive.
  py::object array = np.attr("asarray")(self);
  if (t.dtype() == DataType::kBFloat16) {
    array = array.attr("view")(py::module_::import("ml_dtypes").attr("bfloat16"));
  }
  return array;
}

}  // namespace

void RegisterTensor(py::module_& runtime) {
  py::class_<Tensor>(runtime, "Tensor", py::buffer_protocol(),
                     "A runtime tensor. Built from a NumPy array or a DLPack producer without "
                     "copying (the source is kept alive); read through numpy(), "
                     "numpy.from_dlpack or torch.from_dlpack without copying.")
      .def(py::init([](py::handle source, const std::string& name) {
             return TensorFromPython(source, name);
           }),
           py::arg("source"), py::arg("name") = "")
      .def_property(
          "name", [](const Tensor& t) { return t.name(); },
          [](Tensor& t, std::string name) { t.set_name(std::move(name)); })
      .def_property_readonly("shape",
                             [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", [](const Tensor& t) { return NumpyDtype(t.dtype()); })
      .def_property_readonly(
          "data_type", [](const Tensor& t) { return static_cast<int>(t.dtype()); },
          "TensorProto.DataType of the elements")
      .def_property_readonly(
          "data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.strided_data()); })
      .def_property_readonly("nbytes", [](const Tensor& t) { return t.nbytes(); })
      .def_property_readonly("ndim", [](const Tensor& t) { return t.rank(); })
      .def_property_readonly("size", [](const Tensor& t) { return t.numel(); })
      .def("numpy", &ToNumpy, "A read-only NumPy view of the same bytes (strings: a copy).")
      .def(
          "__dlpack__",
          [](const Tensor& t, py::object stream, py::object max_version, py::object dl_device,
             py::object copy) {
            (void)stream;       // CPU only: there is no stream to synchronise
            (void)max_version;  // the unversioned capsule is always acceptable to consumers
            if (!copy.is_none() && py::bool_(copy)) {
              throw py::buffer_error(
                  "onnx-light tensors export without copying; copy=True "
                  "is not supported");
            }
            if (!dl_device.is_none()) {
              py::tuple device = py::reinterpret_borrow<py::tuple>(dl_device);
              if (device[0].cast<int>() != kDLCPU) {
                throw py::buffer_error(
                    "onnx-light tensors live on the CPU; cannot export to "
                    "another device");
              }
            }
            DLManagedTensor* managed = core::runtime::TensorToDLPack(t);
            PyObject* capsule = PyCapsule_New(managed, "dltensor", &DeleteCapsule);
            if (capsule == nullptr) {
              managed->deleter(managed);
              throw py::error_already_set();
            }
            return py::reinterpret_steal<py::object>(capsule);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const Tensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); })
      .def("__repr__",
           [](const Tensor& t) {
             return "Tensor(name='" + t.name() + "', dtype=" + core::DataTypeName(t.dtype()) +
                    ", shape=" + core::runtime::ShapeToString(t.shape()) + ")";
           })
      .def_buffer([](const Tensor& t) {
        const char* format = BufferFormat(t.dtype());
        OL_CHECK(format != nullptr, ErrorCode::kNotImplemented,
                 "tensor '" + t.name() + "' of type " + core::DataTypeName(t.dtype()) +
                     " has no buffer-protocol representation");
        const size_t itemsize = static_cast<size_t>(core::ElementBits(t.dtype()) / 8);
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        return py::buffer_info(const_cast<void*>(t.strided_data()),
                               static_cast<py::ssize_t>(itemsize), format,
                               static_cast<py::ssize_t>(shape.size()), shape,
                               ByteStrides(t, itemsize), /*readonly=*/true);
      });
}

}  // namespace onnx_light::python
