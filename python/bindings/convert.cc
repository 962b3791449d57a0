#include "python/bindings/convert.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <vector>

#include "core/dlpack.h"
#include "core/error.h"

namespace onnx_light::python {

using core::DataType;
using core::ErrorCode;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

std::string TypeName(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

bool InterpreterAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Holds a buffer-protocol export (and so the exporting array) for as long as a tensor views
// it. The last owner handle may die on a worker thread: the GIL is taken to release.
struct PyBufferOwner {
  Py_buffer view{};
  PyBufferOwner() = default;
  PyBufferOwner(const PyBufferOwner&) = delete;
  PyBufferOwner& operator=(const PyBufferOwner&) = delete;
  ~PyBufferOwner() {
    if (view.obj == nullptr || !InterpreterAlive()) return;  // at exit: leak, never crash
    PyGILState_STATE state = PyGILState_Ensure();
    PyBuffer_Release(&view);
    PyGILState_Release(state);
  }
};

// The DataType of a PEP 3118 format string; kUndefined when unsupported. `swapped` is set
// for a non-native byte order.
DataType DataTypeFromFormat(std::string format, Py_ssize_t itemsize, bool* swapped) {
  *swapped = false;
  if (!format.empty() && (format[0] == '@' || format[0] == '=')) format.erase(0, 1);
  if (!format.empty() && (format[0] == '<' || format[0] == '>' || format[0] == '!')) {
    const bool little = format[0] == '<';
    const bool native_little = PY_LITTLE_ENDIAN;
    *swapped = little != native_little && itemsize > 1;
    format.erase(0, 1);
  }
  if (format.size() != 1) return DataType::kUndefined;
  switch (format[0]) {
    case 'f':
      return DataType::kFloat;
    case 'd':
      return DataType::kDouble;
    case 'e':
      return DataType::kFloat16;
    case '?':
      return DataType::kBool;
    case 'b':
      return DataType::kInt8;
    case 'B':
      return DataType::kUint8;
    case 'h':
      return DataType::kInt16;
    case 'H':
      return DataType::kUint16;
    case 'i':
    case 'l':
    case 'q':
      return itemsize == 4   ? DataType::kInt32
             : itemsize == 8 ? DataType::kInt64
                             : DataType::kUndefined;
    case 'I':
    case 'L':
    case 'Q':
      return itemsize == 4   ? DataType::kUint32
             : itemsize == 8 ? DataType::kUint64
                             : DataType::kUndefined;
    default:
      return DataType::kUndefined;
  }
}

Tensor FromBuffer(py::handle obj, const std::string& name) {
  auto owner = std::make_shared<PyBufferOwner>();
  if (PyObject_GetBuffer(obj.ptr(), &owner->view, PyBUF_RECORDS_RO) != 0) {
    py::error_already_set err;
    core::Throw(ErrorCode::kInvalidArgument, "input '" + name +
                                                 "': its buffer cannot be read without a copy (" +
                                                 std::string(err.what()) + ")");
  }
  const Py_buffer& v = owner->view;
  const std::string format = v.format != nullptr ? v.format : "B";
  bool swapped = false;
  const DataType dtype = DataTypeFromFormat(format, v.itemsize, &swapped);
  OL_CHECK(!swapped, ErrorCode::kInvalidArgument,
           "input '" + name + "' is byte-swapped (format '" + format +
               "', non-native byte order); convert it to native order first "
               "(e.g. array.astype(array.dtype.newbyteorder('=')))");
  OL_CHECK(dtype != DataType::kUndefined, ErrorCode::kInvalidArgument,
           "input '" + name + "' has an unsupported dtype (buffer format '" + format + "', " +
               std::to_string(v.itemsize) + "-byte items)");
  Shape shape(v.shape, v.shape + v.ndim);
  if (v.ndim == 0) shape.clear();
  const int64_t numel = core::runtime::ShapeNumel(shape);  // checked: no overflow
  // Compact row-major: dimensions of size 1 are never stepped over, so their strides do not
  // matter; an empty array has no layout.
  if (v.strides != nullptr && numel > 0) {
    int64_t expected = v.itemsize;
    for (int i = v.ndim - 1; i >= 0; --i) {
      if (v.shape[i] != 1 && v.strides[i] != expected) {
        core::Throw(ErrorCode::kInvalidArgument,
                    "input '" + name + "' is noncontiguous (shape " +
                        core::runtime::ShapeToString(shape) + ", strides in bytes " +
                        core::runtime::ShapeToString(Shape(v.strides, v.strides + v.ndim)) +
                        "); onnx-light does not copy inputs: pass a C-contiguous array "
                        "(numpy.ascontiguousarray)");
      }
      expected *= v.shape[i];
    }
  }
  OL_CHECK(reinterpret_cast<uintptr_t>(v.buf) % static_cast<uintptr_t>(v.itemsize) == 0,
           ErrorCode::kInvalidArgument,
           "input '" + name + "' data is not aligned to its " + std::to_string(v.itemsize) +
               "-byte elements");
  const void* data = v.buf;
  return Tensor::Borrow(name, dtype, std::move(shape), data, std::move(owner));
}

// NumPy str/bytes/object arrays: strings are materialized (the one converted case).
Tensor FromStringArray(py::handle array, const std::string& name, char kind) {
  Shape shape = array.attr("shape").cast<Shape>();
  py::list items = array.attr("ravel")().attr("tolist")();
  std::vector<std::string> values;
  values.reserve(items.size());
  for (py::handle item : items) {
    if (PyUnicode_Check(item.ptr())) {
      values.push_back(item.cast<std::string>());
    } else if (PyBytes_Check(item.ptr())) {
      values.emplace_back(PyBytes_AS_STRING(item.ptr()), PyBytes_GET_SIZE(item.ptr()));
    } else {
      core::Throw(ErrorCode::kInvalidArgument,
                  "input '" + name + "' has an unsupported dtype (" +
                      (kind == 'O' ? std::string("object array holding ") + TypeName(item)
                                   : std::string(1, kind)) +
                      "); object arrays are accepted only when every element is str or bytes");
    }
  }
  return Tensor::FromStrings(name, std::move(shape), std::move(values));
}

Tensor FromDLPack(py::handle obj, const std::string& name) {
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple device = obj.attr("__dlpack_device__")();
    const int device_type = device[0].cast<int>();
    OL_CHECK(device_type == kDLCPU, ErrorCode::kInvalidArgument,
             "input '" + name + "' is on DLPack device type " + std::to_string(device_type) +
                 "; only CPU tensors are accepted (no implicit device copy)");
  }
  py::object capsule = obj.attr("__dlpack__")();
  PyObject* cap = capsule.ptr();
  OL_CHECK(PyCapsule_IsValid(cap, "dltensor"), ErrorCode::kInvalidArgument,
           "input '" + name + "': __dlpack__ did not return an unconsumed 'dltensor' capsule");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  // On failure nothing was adopted: the capsule keeps its name and frees the tensor itself.
  Tensor t = core::runtime::TensorFromDLPack(managed, name);
  PyCapsule_SetName(cap, "used_dltensor");
  return t;
}

}  // namespace

namespace {

// numpy.ndarray (never released: it lives as long as the interpreter), or null when NumPy
// is not importable.
PyObject* NumpyArrayType() {
  static PyObject* type = []() -> PyObject* {
    try {
      py::object ndarray = py::module_::import("numpy").attr("ndarray");
      return ndarray.release().ptr();
    } catch (py::error_already_set&) {
      return nullptr;
    }
  }();
  return type;
}

// A plain NumPy array of a built-in numeric or boolean dtype: read through the buffer
// protocol at once, without the attribute probes below (each probe of a missing attribute
// raises and clears an AttributeError, which dominated small conversions).
bool IsPlainNumericArray(py::handle obj) {
  PyObject* ndarray = NumpyArrayType();
  if (ndarray == nullptr || Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(ndarray))
    return false;
  py::object dtype = obj.attr("dtype");
  // 1: compiled into NumPy (user-defined dtypes such as ml_dtypes' bfloat16/float8 are 2).
  py::object builtin = dtype.attr("isbuiltin");
  if (!py::isinstance<py::int_>(builtin) || builtin.cast<int>() != 1) return false;
  py::object kind = dtype.attr("kind");
  if (!py::isinstance<py::str>(kind)) return false;
  const std::string k = kind.cast<std::string>();
  return k.size() == 1 && std::string("biufc").find(k[0]) != std::string::npos;
}

// The leading fields of NumPy's ndarray and dtype objects, which NumPy's own C API macros
// read directly (PyArray_DATA, PyArray_DIMS, PyArray_FLAGS, PyArray_DESCR, descr->type_num,
// descr->byteorder): the same layout in NumPy 1.x and 2.x. NumPy's headers are not a build
// dependency, so they are spelled out here.
struct NumpyArrayFields {
  PyObject_HEAD char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NumpyDescrFields {
  PyObject_HEAD PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
  char former_flags;
  int type_num;
};

// NumPy's built-in type numbers (NPY_BOOL ... NPY_ULONGLONG, NPY_FLOAT, NPY_DOUBLE, NPY_HALF);
// kUndefined for every other (complex, strings, objects, user-defined such as bfloat16).
DataType DataTypeOfNumpyTypeNum(int type_num) {
  constexpr bool kLong64 = sizeof(long) == 8;
  switch (type_num) {
    case 0:
      return DataType::kBool;
    case 1:
      return DataType::kInt8;
    case 2:
      return DataType::kUint8;
    case 3:
      return DataType::kInt16;
    case 4:
      return DataType::kUint16;
    case 5:
      return DataType::kInt32;
    case 6:
      return DataType::kUint32;
    case 7:
      return kLong64 ? DataType::kInt64 : DataType::kInt32;
    case 8:
      return kLong64 ? DataType::kUint64 : DataType::kUint32;
    case 9:
      return DataType::kInt64;
    case 10:
      return DataType::kUint64;
    case 11:
      return DataType::kFloat;
    case 12:
      return DataType::kDouble;
    case 23:
      return DataType::kFloat16;
    default:
      return DataType::kUndefined;
  }
}

// Keeps a NumPy array alive while a tensor borrows its data; the last handle may die on a
// worker thread, so the GIL is taken to release it.
std::shared_ptr<const void> ArrayOwner(py::handle array) {
  return std::shared_ptr<PyObject>(array.inc_ref().ptr(), [](PyObject* obj) {
    if (!InterpreterAlive()) return;  // at exit: leak, never crash
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(obj);
    PyGILState_Release(state);
  });
}

// The common case without the buffer protocol (whose export builds a format string per
// call): an ndarray that is C-contiguous, aligned, in native byte order and of a built-in
// numeric dtype. Anything else returns nullopt and takes the checked buffer path, which
// names what is wrong.
std::optional<Tensor> BorrowNativeArray(py::handle obj, const std::string& name) {
  PyObject* ndarray = NumpyArrayType();
  if (ndarray == nullptr || Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(ndarray))
    return std::nullopt;
  const auto* array = reinterpret_cast<const NumpyArrayFields*>(obj.ptr());
  constexpr int kCContiguous = 0x0001, kAligned = 0x0100;  // NPY_ARRAY_C_CONTIGUOUS, _ALIGNED
  if ((array->flags & (kCContiguous | kAligned)) != (kCContiguous | kAligned)) return std::nullopt;
  const auto* descr = reinterpret_cast<const NumpyDescrFields*>(array->descr);
  const bool swapped = descr->byteorder == (PY_LITTLE_ENDIAN ? '>' : '<');
  const DataType dtype = DataTypeOfNumpyTypeNum(descr->type_num);
  if (swapped || dtype == DataType::kUndefined || array->nd < 0) return std::nullopt;
  Shape shape(array->dimensions, array->dimensions + array->nd);
  core::runtime::ShapeNumel(shape);  // checked: no overflow
  return Tensor::Borrow(name, dtype, std::move(shape), array->data, ArrayOwner(obj));
}

}  // namespace

std::optional<Tensor> PlainArrayToTensor(py::handle obj, const std::string& name) {
  if (std::optional<Tensor> t = BorrowNativeArray(obj, name)) return t;
  if (!IsPlainNumericArray(obj)) return std::nullopt;
  return FromBuffer(obj, name);
}

Tensor TensorFromPython(py::handle obj, const std::string& name) {
  if (std::optional<Tensor> t = PlainArrayToTensor(obj, name)) return std::move(*t);
  if (py::isinstance<Tensor>(obj)) {
    Tensor t = obj.cast<const Tensor&>();  // shares the owner; metadata is independent
    t.set_name(name);
    return t;
  }
  if (py::hasattr(obj, "requires_grad") && py::bool_(obj.attr("requires_grad"))) {
    core::Throw(ErrorCode::kInvalidArgument,
                "input '" + name +
                    "' is a tensor that requires grad; DLPack cannot export it. "
                    "Pass tensor.detach() (it shares the same storage, no copy)");
  }
  if (py::hasattr(obj, "dtype") && py::hasattr(obj, "ravel") && py::hasattr(obj, "shape")) {
    py::object kind = py::getattr(obj.attr("dtype"), "kind", py::none());
    if (py::isinstance<py::str>(kind)) {
      const std::string k = kind.cast<std::string>();
      if (k == "U" || k == "S" || k == "O") return FromStringArray(obj, name, k[0]);
    }
    // ml_dtypes arrays (bfloat16, float8: what onnx.numpy_helper returns) have no buffer
    // format: read their bytes through a same-size unsigned view (zero copy) and retype.
    py::object dtype_name = py::getattr(obj.attr("dtype"), "name", py::none());
    if (py::isinstance<py::str>(dtype_name) && py::hasattr(obj, "view")) {
      static const std::pair<const char*, std::pair<DataType, const char*>> kBitTypes[] = {
          {"bfloat16", {DataType::kBFloat16, "uint16"}},
          {"float8_e4m3fn", {DataType::kFloat8E4M3FN, "uint8"}},
          {"float8_e4m3fnuz", {DataType::kFloat8E4M3FNUZ, "uint8"}},
          {"float8_e5m2", {DataType::kFloat8E5M2, "uint8"}},
          {"float8_e5m2fnuz", {DataType::kFloat8E5M2FNUZ, "uint8"}},
      };
      const std::string dn = dtype_name.cast<std::string>();
      for (const auto& [label, target] : kBitTypes) {
        if (dn != label) continue;
        Tensor bits = FromBuffer(obj.attr("view")(target.second), name);
        return Tensor::Borrow(name, target.first, bits.shape(), bits.raw_data(), bits.owner());
      }
    }
  }
  if (PyObject_CheckBuffer(obj.ptr())) return FromBuffer(obj, name);
  if (py::hasattr(obj, "__dlpack__")) return FromDLPack(obj, name);
  core::Throw(ErrorCode::kTypeError, "input '" + name +
                                         "': expected a runtime Tensor, a NumPy array or a DLPack "
                                         "producer (e.g. a CPU torch.Tensor), got " +
                                         TypeName(obj));
}

py::object TensorToPython(const Tensor& tensor) { return py::cast(tensor); }

}  // namespace onnx_light::python
