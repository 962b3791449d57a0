// Python classes for every message of proto/onnx_light.proto, generated at import time from
// the C++ descriptors and backed by the C++ messages (see proto_wrapper.h). The API is the
// subset of protobuf's Python API that ONNX code uses.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/model_io.h"
#include "core/standard_onnx.h"
#include "onnx_light.pb.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {
namespace {

using core::ErrorCode;
using core::Throw;
using FD = pb::FieldDescriptor;

py::list AsList(py::handle seq) { return py::list(py::reinterpret_borrow<py::object>(seq)); }

std::string TypeName(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

[[noreturn]] void ThrowFieldType(const FD* f, py::handle value, const char* expected) {
  Throw(ErrorCode::kTypeError, "field " + f->full_name() + ": " +
                                   py::repr(value).cast<std::string>() + " has type " +
                                   TypeName(value) + ", but expected one of: " + expected);
}

const FD* FieldByName(const pb::Descriptor* d, const std::string& name) {
  const FD* f = d->FindFieldByName(name);
  OL_CHECK(f != nullptr, ErrorCode::kInvalidArgument,
           "Protocol message " + d->name() + " has no \"" + name + "\" field.");
  return f;
}

// ---- scalars ---------------------------------------------------------------------------

template <typename T>
T ToInteger(const FD* f, py::handle v) {
  if (PyFloat_Check(v.ptr()) || !PyIndex_Check(v.ptr())) ThrowFieldType(f, v, "int");
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!index) throw py::error_already_set();
  bool ok = true;
  T result{};
  if constexpr (std::is_signed_v<T>) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    ok = overflow == 0 && x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max();
    result = static_cast<T>(x);
  } else {
    if (py::int_(index) < py::int_(0)) {
      ok = false;
    } else {
      unsigned long long x = PyLong_AsUnsignedLongLong(index.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        ok = false;
      }
      ok = ok && x <= std::numeric_limits<T>::max();
      result = static_cast<T>(x);
    }
  }
  OL_CHECK(ok, ErrorCode::kInvalidArgument,
           "field " + f->full_name() + ": value out of range: " + py::repr(v).cast<std::string>());
  return result;
}

double ToDouble(const FD* f, py::handle v) {
  if (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr())) ThrowFieldType(f, v, "int, float");
  double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    ThrowFieldType(f, v, "int, float");
  }
  return d;
}

bool ToBool(const FD* f, py::handle v) {
  if (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) || PyFloat_Check(v.ptr())) {
    ThrowFieldType(f, v, "bool, int");
  }
  int r = PyObject_IsTrue(v.ptr());
  if (r < 0) throw py::error_already_set();
  return r != 0;
}

std::string ToStringValue(const FD* f, py::handle v) {
  if (PyUnicode_Check(v.ptr())) {
    // surrogateescape: bytes that are not UTF-8 were read as lone surrogates; write them back.
    py::object b = py::reinterpret_steal<py::object>(
        PyUnicode_AsEncodedString(v.ptr(), "utf-8", "surrogateescape"));
    if (!b) throw py::error_already_set();
    return std::string(PyBytes_AS_STRING(b.ptr()), PyBytes_GET_SIZE(b.ptr()));
  }
  if (PyBytes_Check(v.ptr()))
    return std::string(PyBytes_AS_STRING(v.ptr()), PyBytes_GET_SIZE(v.ptr()));
  if (PyByteArray_Check(v.ptr())) {
    return std::string(PyByteArray_AS_STRING(v.ptr()), PyByteArray_GET_SIZE(v.ptr()));
  }
  ThrowFieldType(f, v, "str, bytes");
}

int ToEnum(const FD* f, py::handle v) {
  const pb::EnumDescriptor* e = f->enum_type();
  if (PyUnicode_Check(v.ptr())) {
    std::string name = v.cast<std::string>();
    const pb::EnumValueDescriptor* value = e->FindValueByName(name);
    OL_CHECK(value != nullptr, ErrorCode::kInvalidArgument,
             "field " + f->full_name() + ": unknown enum label \"" + name + "\"");
    return value->number();
  }
  int number = ToInteger<int32_t>(f, v);
  OL_CHECK(e->FindValueByNumber(number) != nullptr, ErrorCode::kInvalidArgument,
           "field " + f->full_name() + ": unknown enum value " + std::to_string(number) + " for " +
               e->full_name());
  return number;
}

enum class Store { kSet, kSetRepeated, kAdd };

// Converts `v` for field `f` and stores it (singular, element `index`, or appended).
void StoreScalar(pb::Message* m, const FD* f, py::handle v, Store op, int index = 0) {
  const pb::Reflection* r = m->GetReflection();
#define OL_STORE(Type, value)                          \
  do {                                                 \
    auto x = (value);                                  \
    if (op == Store::kSet) {                           \
      r->Set##Type(m, f, std::move(x));                \
    } else if (op == Store::kSetRepeated) {            \
      r->SetRepeated##Type(m, f, index, std::move(x)); \
    } else {                                           \
      r->Add##Type(m, f, std::move(x));                \
    }                                                  \
  } while (0)
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      OL_STORE(Int32, ToInteger<int32_t>(f, v));
      break;
    case FD::CPPTYPE_INT64:
      OL_STORE(Int64, ToInteger<int64_t>(f, v));
      break;
    case FD::CPPTYPE_UINT32:
      OL_STORE(UInt32, ToInteger<uint32_t>(f, v));
      break;
    case FD::CPPTYPE_UINT64:
      OL_STORE(UInt64, ToInteger<uint64_t>(f, v));
      break;
    case FD::CPPTYPE_DOUBLE:
      OL_STORE(Double, ToDouble(f, v));
      break;
    case FD::CPPTYPE_FLOAT:
      OL_STORE(Float, static_cast<float>(ToDouble(f, v)));
      break;
    case FD::CPPTYPE_BOOL:
      OL_STORE(Bool, ToBool(f, v));
      break;
    case FD::CPPTYPE_ENUM:
      OL_STORE(EnumValue, ToEnum(f, v));
      break;
    case FD::CPPTYPE_STRING:
      OL_STORE(String, ToStringValue(f, v));
      break;
    case FD::CPPTYPE_MESSAGE:
      Throw(ErrorCode::kRuntime, "StoreScalar called for message field " + f->full_name());
  }
#undef OL_STORE
}

// Singular value (index < 0) or element `index` of a scalar field.
py::object ScalarToPython(const pb::Message& m, const FD* f, int index) {
  const pb::Reflection* r = m.GetReflection();
#define OL_GET(Type) (index < 0 ? r->Get##Type(m, f) : r->GetRepeated##Type(m, f, index))
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return py::int_(OL_GET(Int32));
    case FD::CPPTYPE_INT64:
      return py::int_(OL_GET(Int64));
    case FD::CPPTYPE_UINT32:
      return py::int_(OL_GET(UInt32));
    case FD::CPPTYPE_UINT64:
      return py::int_(OL_GET(UInt64));
    case FD::CPPTYPE_DOUBLE:
      return py::float_(OL_GET(Double));
    case FD::CPPTYPE_FLOAT:
      return py::float_(OL_GET(Float));
    case FD::CPPTYPE_BOOL:
      return py::bool_(OL_GET(Bool));
    case FD::CPPTYPE_ENUM:
      return py::int_(OL_GET(EnumValue));
    case FD::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& s = index < 0 ? r->GetStringReference(m, f, &scratch)
                                       : r->GetRepeatedStringReference(m, f, index, &scratch);
      if (f->type() == FD::TYPE_BYTES) return py::bytes(s);
      PyObject* u =
          PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
      if (u == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(u);
    }
    case FD::CPPTYPE_MESSAGE:
      break;
  }
#undef OL_GET
  Throw(ErrorCode::kRuntime, "ScalarToPython called for message field " + f->full_name());
}

// ---- messages from Python values -------------------------------------------------------

void InitFromKwargs(pb::Message* m, py::handle kwargs);

bool IsOurMessage(py::handle v) { return py::isinstance<MessageRef>(v); }

// Copies a Python value (one of our messages of the same type, a dict of fields, or a
// message of the `onnx` package with the same name) into `dst`, replacing its content.
void CopyInto(pb::Message* dst, py::handle src) {
  const pb::Descriptor* d = dst->GetDescriptor();
  if (IsOurMessage(src)) {
    const MessageRef& ref = src.cast<const MessageRef&>();
    OL_CHECK(ref.descriptor() == d, ErrorCode::kTypeError,
             "expected " + d->full_name() + ", got " + ref.descriptor()->full_name());
    const pb::Message& from = ref.Get();
    if (&from == dst) return;
    // `from` may live inside `dst`: Clear() would destroy it before the copy.
    std::unique_ptr<pb::Message> tmp(from.New());
    tmp->CopyFrom(from);
    dst->GetReflection()->Swap(dst, tmp.get());
    return;
  }
  if (PyDict_Check(src.ptr())) {
    // Nested dicts of fields recurse here: a self-referential one would overflow the stack.
    // Protobuf refuses to parse messages nested deeper than 100 levels, so do we.
    static thread_local int depth = 0;
    struct Nest {
      Nest() { ++depth; }
      ~Nest() { --depth; }
    } nest;
    OL_CHECK(depth <= 100, ErrorCode::kInvalidArgument,
             d->name() +
                 ": dicts of fields nest more than 100 levels deep (is the dict "
                 "self-referential?)");
    dst->Clear();
    InitFromKwargs(dst, src);
    return;
  }
  if (py::hasattr(src, "SerializeToString") && py::hasattr(src, "DESCRIPTOR") &&
      py::str(src.attr("DESCRIPTOR").attr("name")).cast<std::string>() == d->name()) {
    std::string bytes = src.attr("SerializeToString")().cast<std::string>();
    OL_CHECK(dst->ParseFromString(bytes), ErrorCode::kInvalidArgument,
             "could not parse the serialization of a " + d->name());
    return;
  }
  Throw(ErrorCode::kTypeError,
        "expected " + d->full_name() + " (or a dict of its fields), got " + TypeName(src));
}

// A new heap message of `d` holding a copy of `src`.
std::unique_ptr<pb::Message> NewCopy(const pb::Descriptor* d, py::handle src) {
  std::unique_ptr<pb::Message> m(pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
  CopyInto(m.get(), src);
  return m;
}

void SetFieldFromPython(pb::Message* m, const FD* f, py::handle v) {
  const pb::Reflection* r = m->GetReflection();
  if (f->is_repeated()) {
    r->ClearField(m, f);
    for (py::handle item : py::iter(v)) {
      if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        r->AddAllocatedMessage(m, f, NewCopy(f->message_type(), item).release());
      } else {
        StoreScalar(m, f, item, Store::kAdd);
      }
    }
  } else if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
    CopyInto(r->MutableMessage(m, f), v);
  } else {
    StoreScalar(m, f, v, Store::kSet);
  }
}

void InitFromKwargs(pb::Message* m, py::handle kwargs) {
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(kwargs)) {
    if (value.is_none()) continue;  // as protobuf: None leaves the field unset
    const FD* f = FieldByName(m->GetDescriptor(), py::str(key).cast<std::string>());
    SetFieldFromPython(m, f, value);
  }
}

// ---- repeated fields -------------------------------------------------------------------

struct RepeatedRef {
  MessageRef owner;
  const FD* field;

  int Size() const {
    const pb::Message* m = owner.Find();
    return m == nullptr ? 0 : m->GetReflection()->FieldSize(*m, field);
  }
  int Index(int64_t i) const {
    const int64_t n = Size();
    const int64_t j = i < 0 ? i + n : i;
    if (j < 0 || j >= n) throw py::index_error("list index out of range");
    return static_cast<int>(j);
  }
  std::vector<int> SliceIndices(const py::slice& s) const {
    size_t start = 0, stop = 0, step = 0, length = 0;
    if (!s.compute(static_cast<size_t>(Size()), &start, &stop, &step, &length)) {
      throw py::error_already_set();
    }
    std::vector<int> out;
    for (size_t k = 0; k < length; ++k) {
      out.push_back(static_cast<int>(static_cast<Py_ssize_t>(start) +
                                     static_cast<Py_ssize_t>(k) * static_cast<Py_ssize_t>(step)));
    }
    return out;
  }
  // Removes the given element indices, keeping the order of the others. Removed message
  // elements stay alive, detached, so that their views keep working.
  void Remove(std::vector<int> indices) const {
    if (indices.empty()) return;
    pb::Message* m = owner.Mutable();
    const pb::Reflection* r = m->GetReflection();
    std::set<int> doomed(indices.begin(), indices.end());
    const int n = r->FieldSize(*m, field);
    int w = 0;
    for (int i = 0; i < n; ++i) {
      if (doomed.count(i)) continue;
      if (w != i) r->SwapElements(m, field, w, i);
      ++w;
    }
    for (int i = w; i < n; ++i) {
      if (field->cpp_type() == FD::CPPTYPE_MESSAGE) {
        owner.tree()->Detach(r->ReleaseLast(m, field));
      } else {
        r->RemoveLast(m, field);
      }
    }
  }
  // Moves the last element to position `index`.
  void MoveLastTo(int64_t index) const {
    pb::Message* m = owner.Mutable();
    const pb::Reflection* r = m->GetReflection();
    const int n = r->FieldSize(*m, field);
    int64_t target =
        index < 0 ? std::max<int64_t>(0, index + n - 1) : std::min<int64_t>(index, n - 1);
    for (int i = n - 1; i > target; --i) r->SwapElements(m, field, i, i - 1);
  }
  void Clear() const {
    if (owner.Find() == nullptr) return;
    Remove([&] {
      std::vector<int> all(static_cast<size_t>(Size()));
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
      return all;
    }());
  }
};

struct RepeatedScalar : RepeatedRef {
  py::object Item(int i) const { return ScalarToPython(owner.Get(), field, i); }
  py::list ToList() const {
    py::list out;
    const int n = Size();
    for (int i = 0; i < n; ++i) out.append(Item(i));
    return out;
  }
  // Appends all values atomically: they are converted into a scratch message first.
  void Extend(py::handle values) const {
    std::unique_ptr<pb::Message> scratch(owner.Get().New());
    for (py::handle v : py::iter(values)) StoreScalar(scratch.get(), field, v, Store::kAdd);
    owner.Mutable()->MergeFrom(*scratch);
  }
  void Replace(py::handle values) const {
    std::unique_ptr<pb::Message> scratch(owner.Get().New());
    for (py::handle v : py::iter(values)) StoreScalar(scratch.get(), field, v, Store::kAdd);
    pb::Message* m = owner.Mutable();
    m->GetReflection()->ClearField(m, field);
    m->MergeFrom(*scratch);
  }
};

struct RepeatedComposite : RepeatedRef {
  py::object Item(int i) const { return WrapMessage(owner.Element(field, i)); }
  py::list ToList() const {
    py::list out;
    const int n = Size();
    for (int i = 0; i < n; ++i) out.append(Item(i));
    return out;
  }
  void Extend(py::handle values) const {
    std::vector<std::unique_ptr<pb::Message>> copies;
    for (py::handle v : py::iter(values)) copies.push_back(NewCopy(field->message_type(), v));
    pb::Message* m = owner.Mutable();
    for (auto& c : copies) m->GetReflection()->AddAllocatedMessage(m, field, c.release());
  }
};

bool MessagesEqual(const pb::Message& a, const pb::Message& b) {
  if (a.GetDescriptor() != b.GetDescriptor()) return false;
  // NaN equals NaN, as in protobuf's Python API (a tensor holding NaN equals its copy).
  pb::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  pb::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

// ---- descriptors and enums -------------------------------------------------------------

struct FieldDesc {
  const FD* f;
};
struct MessageDesc {
  const pb::Descriptor* d;
};
struct EnumType {
  const pb::EnumDescriptor* e;
};

py::object FieldValue(const MessageRef& self, const FD* f) {
  if (f->is_repeated()) {
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE) return py::cast(RepeatedComposite{{self, f}});
    return py::cast(RepeatedScalar{{self, f}});
  }
  if (f->cpp_type() == FD::CPPTYPE_MESSAGE) return WrapMessage(self.Sub(f));
  return ScalarToPython(self.Get(), f, -1);
}

void SetFieldAttr(const MessageRef& self, const FD* f, py::handle v) {
  if (f->is_repeated()) {
    throw py::attribute_error("Assignment not allowed to repeated field \"" + f->name() +
                              "\" in protocol message object.");
  }
  pb::Message* m = self.Mutable();
  if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
    if (v.is_none()) {
      m->GetReflection()->ClearField(m, f);
    } else {
      CopyInto(m->GetReflection()->MutableMessage(m, f), v);
    }
    return;
  }
  if (v.is_none()) ThrowFieldType(f, v, "a value (use ClearField to unset)");
  StoreScalar(m, f, v, Store::kSet);
}

const pb::OneofDescriptor* RealOneof(const FD* f) {
  const pb::OneofDescriptor* o = f->containing_oneof();
  return (o != nullptr && !o->is_synthetic()) ? o : nullptr;
}

std::string ReadBuffer(py::handle data) {
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
  return std::string(static_cast<const char*>(info.ptr),
                     static_cast<size_t>(info.size * info.itemsize));
}

py::bytes Serialize(const pb::Message& m, bool deterministic) {
  std::string out;
  {
    pb::io::StringOutputStream stream(&out);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(deterministic);
    OL_CHECK(m.SerializeToCodedStream(&coded), ErrorCode::kInvalidArgument,
             "could not serialize " + m.GetDescriptor()->name());
  }
  return py::bytes(out);
}

std::string TextFormat(const pb::Message& m) {
  std::string out;
  pb::TextFormat::PrintToString(m, &out);
  return out;
}

void ClearRepeatedOrField(const MessageRef& self, const FD* f) {
  if (f->is_repeated() && f->cpp_type() == FD::CPPTYPE_MESSAGE) {
    RepeatedComposite{{self, f}}.Clear();
    return;
  }
  if (self.Find() == nullptr) return;
  pb::Message* m = self.Mutable();
  m->GetReflection()->ClearField(m, f);
}

// ---- classes ---------------------------------------------------------------------------

void AddEnum(py::object scope, const pb::EnumDescriptor* e) {
  scope.attr(e->name().c_str()) = py::cast(EnumType{e});
  for (int i = 0; i < e->value_count(); ++i) {
    scope.attr(e->value(i)->name().c_str()) = py::int_(e->value(i)->number());
  }
}

py::object MakeClass(py::handle meta, py::handle base, const pb::Descriptor* d,
                     const std::string& qual_prefix) {
  const std::string qualname = qual_prefix.empty() ? d->name() : qual_prefix + "." + d->name();
  py::dict ns;
  ns["__slots__"] = py::tuple();
  ns["__module__"] = "onnx_light.onnx";
  ns["__qualname__"] = qualname;
  ns["__doc__"] = "The C++ message " + d->full_name() + " seen from Python.";
  py::object cls = meta(d->name(), py::make_tuple(base), ns);
  RegisterMessageClass(d, cls);
  py::object property = py::module_::import("builtins").attr("property");
  py::object staticmethod = py::module_::import("builtins").attr("staticmethod");

  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    py::cpp_function getter([f](const MessageRef& self) { return FieldValue(self, f); });
    py::cpp_function setter(
        [f](const MessageRef& self, py::handle v) { SetFieldAttr(self, f, v); });
    cls.attr(f->name().c_str()) = property(getter, setter, py::none(), f->full_name());
  }

  cls.attr("__init__") = py::cpp_function(
      [d](py::handle self, py::kwargs kwargs) {
        std::shared_ptr<pb::Message> root(
            pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
        InitFromKwargs(root.get(), kwargs);
        InitMessageObject(self, MessageRef::Root(std::move(root)));
      },
      py::is_method(cls), py::name("__init__"));
  cls.attr("FromString") = staticmethod(py::cpp_function([d](py::handle data) {
    std::shared_ptr<pb::Message> root(
        pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
    std::string bytes = ReadBuffer(data);
    OL_CHECK(root->ParseFromString(bytes), ErrorCode::kInvalidArgument,
             "Error parsing message: the bytes are not a valid " + d->name());
    return MessageToPython(std::move(root));
  }));
  cls.attr("DESCRIPTOR") = py::cast(MessageDesc{d});

  for (int i = 0; i < d->enum_type_count(); ++i) AddEnum(cls, d->enum_type(i));
  for (int i = 0; i < d->nested_type_count(); ++i) {
    const pb::Descriptor* nested = d->nested_type(i);
    if (nested->options().map_entry()) continue;
    cls.attr(nested->name().c_str()) = MakeClass(meta, base, nested, qualname);
  }
  return cls;
}

// FieldDescriptor: the read-only view of a field's descriptor that `onnx` code reads.
void RegisterFieldDescriptor(py::module_& proto) {
  py::class_<FieldDesc>(proto, "FieldDescriptor")
      .def_property_readonly("name", [](const FieldDesc& s) { return s.f->name(); })
      .def_property_readonly("full_name", [](const FieldDesc& s) { return s.f->full_name(); })
      .def_property_readonly("number", [](const FieldDesc& s) { return s.f->number(); })
      .def_property_readonly("type",
                             [](const FieldDesc& s) { return static_cast<int>(s.f->type()); })
      .def_property_readonly("cpp_type",
                             [](const FieldDesc& s) { return static_cast<int>(s.f->cpp_type()); })
      .def_property_readonly("label",
                             [](const FieldDesc& s) { return static_cast<int>(s.f->label()); })
      .def_property_readonly("has_presence", [](const FieldDesc& s) { return s.f->has_presence(); })
      .def_property_readonly("message_type",
                             [](const FieldDesc& s) -> py::object {
                               if (s.f->message_type() == nullptr) return py::none();
                               return py::cast(MessageDesc{s.f->message_type()});
                             })
      .def_property_readonly("enum_type",
                             [](const FieldDesc& s) -> py::object {
                               if (s.f->enum_type() == nullptr) return py::none();
                               return py::cast(EnumType{s.f->enum_type()});
                             })
      .def_property_readonly("containing_oneof",
                             [](const FieldDesc& s) -> py::object {
                               const pb::OneofDescriptor* o = RealOneof(s.f);
                               if (o == nullptr) return py::none();
                               return py::str(o->name());
                             })
      .def("__eq__", [](const FieldDesc& a, const FieldDesc& b) { return a.f == b.f; })
      .def("__hash__", [](const FieldDesc& s) { return std::hash<const void*>()(s.f); })
      .def("__repr__",
           [](const FieldDesc& s) { return "<FieldDescriptor " + s.f->full_name() + ">"; })
      .def_property_readonly_static("LABEL_OPTIONAL", [](py::object) { return 1; })
      .def_property_readonly_static("LABEL_REQUIRED", [](py::object) { return 2; })
      .def_property_readonly_static("LABEL_REPEATED", [](py::object) { return 3; })
      .def_property_readonly_static("TYPE_MESSAGE", [](py::object) { return 11; })
      .def_property_readonly_static("CPPTYPE_MESSAGE", [](py::object) { return 10; });
}

// Descriptor: a message type's fields (by order, name and number) and oneofs.
void RegisterMessageDescriptor(py::module_& proto) {
  py::class_<MessageDesc>(proto, "Descriptor")
      .def_property_readonly("name", [](const MessageDesc& s) { return s.d->name(); })
      .def_property_readonly("full_name", [](const MessageDesc& s) { return s.d->full_name(); })
      .def_property_readonly("fields",
                             [](const MessageDesc& s) {
                               py::list out;
                               for (int i = 0; i < s.d->field_count(); ++i) {
                                 out.append(FieldDesc{s.d->field(i)});
                               }
                               return out;
                             })
      .def_property_readonly("fields_by_name",
                             [](const MessageDesc& s) {
                               py::dict out;
                               for (int i = 0; i < s.d->field_count(); ++i) {
                                 out[py::str(s.d->field(i)->name())] = FieldDesc{s.d->field(i)};
                               }
                               return out;
                             })
      .def_property_readonly("fields_by_number",
                             [](const MessageDesc& s) {
                               py::dict out;
                               for (int i = 0; i < s.d->field_count(); ++i) {
                                 out[py::int_(s.d->field(i)->number())] = FieldDesc{s.d->field(i)};
                               }
                               return out;
                             })
      .def_property_readonly("oneofs_by_name",
                             [](const MessageDesc& s) {
                               py::dict out;
                               for (int i = 0; i < s.d->real_oneof_decl_count(); ++i) {
                                 const pb::OneofDescriptor* o = s.d->oneof_decl(i);
                                 py::list fields;
                                 for (int j = 0; j < o->field_count(); ++j) {
                                   fields.append(FieldDesc{o->field(j)});
                                 }
                                 out[py::str(o->name())] = fields;
                               }
                               return out;
                             })
      .def_property_readonly("_concrete_class",
                             [](const MessageDesc& s) { return MessageClass(s.d); })
      .def("__eq__", [](const MessageDesc& a, const MessageDesc& b) { return a.d == b.d; })
      .def("__hash__", [](const MessageDesc& s) { return std::hash<const void*>()(s.d); })
      .def("__repr__",
           [](const MessageDesc& s) { return "<Descriptor " + s.d->full_name() + ">"; });
}

// EnumTypeWrapper: an enum's names and numbers, as protobuf's Python API spells them.
void RegisterEnumType(py::module_& proto) {
  py::class_<EnumType>(proto, "EnumTypeWrapper")
      .def("Name",
           [](const EnumType& s, int number) {
             const pb::EnumValueDescriptor* v = s.e->FindValueByNumber(number);
             OL_CHECK(v != nullptr, ErrorCode::kInvalidArgument,
                      "Enum " + s.e->name() + " has no name defined for value " +
                          std::to_string(number));
             return v->name();
           })
      .def("Value",
           [](const EnumType& s, const std::string& name) {
             const pb::EnumValueDescriptor* v = s.e->FindValueByName(name);
             OL_CHECK(v != nullptr, ErrorCode::kInvalidArgument,
                      "Enum " + s.e->name() + " has no value defined for name '" + name + "'");
             return v->number();
           })
      .def("keys",
           [](const EnumType& s) {
             py::list out;
             for (int i = 0; i < s.e->value_count(); ++i) out.append(s.e->value(i)->name());
             return out;
           })
      .def("values",
           [](const EnumType& s) {
             py::list out;
             for (int i = 0; i < s.e->value_count(); ++i) out.append(s.e->value(i)->number());
             return out;
           })
      .def("items",
           [](const EnumType& s) {
             py::list out;
             for (int i = 0; i < s.e->value_count(); ++i) {
               out.append(py::make_tuple(s.e->value(i)->name(), s.e->value(i)->number()));
             }
             return out;
           })
      .def("__getattr__",
           [](const EnumType& s, const std::string& name) {
             const pb::EnumValueDescriptor* v = s.e->FindValueByName(name);
             if (v == nullptr) throw py::attribute_error(s.e->name() + " has no value " + name);
             return v->number();
           })
      .def_property_readonly("name", [](const EnumType& s) { return s.e->name(); })
      .def_property_readonly("full_name", [](const EnumType& s) { return s.e->full_name(); })
      .def("__repr__",
           [](const EnumType& s) { return "<EnumTypeWrapper " + s.e->full_name() + ">"; });
}

// What both repeated containers share: the read-only list protocol, pop/clear/extend and
// list-like comparison (with a sequence or a container of the same kind). Unhashable.
template <typename Container>
void DefineRepeatedCommon(py::class_<Container>& c) {
  c.def("__len__", &Container::Size)
      .def("__getitem__", [](const Container& s, int64_t i) { return s.Item(s.Index(i)); })
      .def("__getitem__",
           [](const Container& s, const py::slice& sl) {
             py::list out;
             for (int i : s.SliceIndices(sl)) out.append(s.Item(i));
             return out;
           })
      .def("__delitem__", [](const Container& s, int64_t i) { s.Remove({s.Index(i)}); })
      .def("__delitem__",
           [](const Container& s, const py::slice& sl) { s.Remove(s.SliceIndices(sl)); })
      .def("__iter__", [](const Container& s) { return py::iter(s.ToList()); })
      .def("extend", &Container::Extend)
      .def("MergeFrom", &Container::Extend)
      .def(
          "pop",
          [](const Container& s, int64_t i) {
            int j = s.Index(i);
            py::object v = s.Item(j);
            s.Remove({j});
            return v;
          },
          py::arg("index") = -1)
      .def("clear", &Container::Clear)
      .def("__eq__",
           [](const Container& s, py::handle other) -> py::object {
             if (!py::isinstance<py::sequence>(other) && !py::isinstance<Container>(other))
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(s.ToList().equal(AsList(other)));
           })
      .def("__ne__",
           [](const Container& s, py::handle other) -> py::object {
             if (!py::isinstance<py::sequence>(other) && !py::isinstance<Container>(other))
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(!s.ToList().equal(AsList(other)));
           })
      .def("__repr__", [](const Container& s) { return py::repr(s.ToList()); })
      .attr("__hash__") = py::none();
}

// RepeatedScalarContainer: a repeated scalar field as a mutable list (item assignment,
// insertion, removal by value and sorting rewrite the field).
void RegisterRepeatedScalar(py::module_& proto) {
  py::class_<RepeatedScalar> c(proto, "RepeatedScalarContainer");
  DefineRepeatedCommon(c);
  c.def("__setitem__",
        [](const RepeatedScalar& s, int64_t i, py::handle v) {
          int j = s.Index(i);
          StoreScalar(s.owner.Mutable(), s.field, v, Store::kSetRepeated, j);
        })
      .def("__setitem__",
           [](const RepeatedScalar& s, const py::slice& sl, py::handle v) {
             py::list values = s.ToList();
             values[sl] = AsList(v);
             s.Replace(values);
           })
      .def("__contains__",
           [](const RepeatedScalar& s, py::handle v) { return s.ToList().contains(v); })
      .def("append", [](const RepeatedScalar& s,
                        py::handle v) { StoreScalar(s.owner.Mutable(), s.field, v, Store::kAdd); })
      .def("insert",
           [](const RepeatedScalar& s, int64_t i, py::handle v) {
             StoreScalar(s.owner.Mutable(), s.field, v, Store::kAdd);
             s.MoveLastTo(i);
           })
      .def("remove",
           [](const RepeatedScalar& s, py::handle v) {
             py::list values = s.ToList();
             for (size_t i = 0; i < values.size(); ++i) {
               if (py::object(values[i]).equal(py::reinterpret_borrow<py::object>(v))) {
                 s.Remove({static_cast<int>(i)});
                 return;
               }
             }
             throw py::value_error("list.remove(x): x not in list");
           })
      .def(
          "sort",
          [](const RepeatedScalar& s, py::object key, bool reverse) {
            py::list values = s.ToList();
            values.attr("sort")(py::arg("key") = key, py::arg("reverse") = reverse);
            s.Replace(values);
          },
          py::arg("key") = py::none(), py::arg("reverse") = false);
}

// RepeatedCompositeContainer: a repeated message field; add() builds an element in place.
void RegisterRepeatedComposite(py::module_& proto) {
  py::class_<RepeatedComposite> c(proto, "RepeatedCompositeContainer");
  DefineRepeatedCommon(c);
  c.def(
       "add",
       [](const RepeatedComposite& s, py::kwargs kwargs) {
         std::unique_ptr<pb::Message> element(
             pb::MessageFactory::generated_factory()->GetPrototype(s.field->message_type())->New());
         InitFromKwargs(element.get(), kwargs);
         pb::Message* m = s.owner.Mutable();
         m->GetReflection()->AddAllocatedMessage(m, s.field, element.release());
         return s.Item(s.Size() - 1);
       })
      .def("append", [](const RepeatedComposite& s, py::handle v) { s.Extend(py::make_tuple(v)); })
      .def("insert",
           [](const RepeatedComposite& s, int64_t i, py::handle v) {
             s.Extend(py::make_tuple(v));
             s.MoveLastTo(i);
           })
      .def("remove", [](const RepeatedComposite& s, py::handle v) {
        if (IsOurMessage(v)) {
          const pb::Message& target = v.cast<const MessageRef&>().Get();
          const pb::Message& m = s.owner.Get();
          const int n = s.Size();
          for (int i = 0; i < n; ++i) {
            if (MessagesEqual(m.GetReflection()->GetRepeatedMessage(m, s.field, i), target)) {
              s.Remove({i});
              return;
            }
          }
        }
        throw py::value_error("list.remove(x): x not in list");
      });
}

// `bytes` parsed into a fresh message of self's type (self is left as it is).
std::unique_ptr<pb::Message> ParseAs(const MessageRef& self, const std::string& bytes) {
  std::unique_ptr<pb::Message> tmp(self.Get().New());
  OL_CHECK(tmp->ParseFromString(bytes), ErrorCode::kInvalidArgument,
           "Error parsing message: the bytes are not a valid " + self.descriptor()->name());
  return tmp;
}

py::object CopyToPython(const MessageRef& self) {
  std::shared_ptr<pb::Message> copy(self.Get().New());
  copy->CopyFrom(self.Get());
  return MessageToPython(std::move(copy));
}

// Message fields: presence, clearing, oneofs, copying and merging, listing.
void DefineMessageFields(py::class_<MessageRef>& base) {
  base.def("HasField",
           [](const MessageRef& self, const std::string& name) {
             const pb::Descriptor* d = self.descriptor();
             if (const pb::OneofDescriptor* o = d->FindOneofByName(name)) {
               const pb::Message& m = self.Get();
               return m.GetReflection()->HasOneof(m, o);
             }
             const FD* f = d->FindFieldByName(name);
             OL_CHECK(f != nullptr && !f->is_repeated(), ErrorCode::kInvalidArgument,
                      "Protocol message " + d->name() + " has no singular \"" + name + "\" field.");
             const pb::Message* m = self.Find();
             return m != nullptr && m->GetReflection()->HasField(*m, f);
           })
      .def("ClearField",
           [](const MessageRef& self, const std::string& name) {
             const pb::Descriptor* d = self.descriptor();
             if (const pb::OneofDescriptor* o = d->FindOneofByName(name)) {
               if (self.Find() == nullptr) return;
               pb::Message* m = self.Mutable();
               m->GetReflection()->ClearOneof(m, o);
               return;
             }
             ClearRepeatedOrField(self, FieldByName(d, name));
           })
      .def("WhichOneof",
           [](const MessageRef& self, const std::string& name) -> py::object {
             const pb::OneofDescriptor* o = self.descriptor()->FindOneofByName(name);
             OL_CHECK(o != nullptr, ErrorCode::kInvalidArgument,
                      "Protocol message has no oneof \"" + name + "\" field.");
             const pb::Message& m = self.Get();
             const FD* f = m.GetReflection()->GetOneofFieldDescriptor(m, o);
             if (f == nullptr) return py::none();
             return py::str(f->name());
           })
      .def("Clear",
           [](const MessageRef& self) {
             if (self.Find() == nullptr) return;
             const pb::Descriptor* d = self.descriptor();
             for (int i = 0; i < d->field_count(); ++i) ClearRepeatedOrField(self, d->field(i));
             pb::Message* m = self.Mutable();
             m->GetReflection()->MutableUnknownFields(m)->Clear();
           })
      .def("CopyFrom",
           [](const MessageRef& self, py::handle other) { CopyInto(self.Mutable(), other); })
      .def("MergeFrom",
           [](const MessageRef& self, py::handle other) {
             std::unique_ptr<pb::Message> tmp = NewCopy(self.descriptor(), other);
             self.Mutable()->MergeFrom(*tmp);
           })
      .def("ListFields", [](const MessageRef& self) {
        const pb::Message& m = self.Get();
        std::vector<const FD*> fields;
        m.GetReflection()->ListFields(m, &fields);
        py::list out;
        for (const FD* f : fields) out.append(py::make_tuple(FieldDesc{f}, FieldValue(self, f)));
        return out;
      });
}

// Message bytes: serialization and parsing (both parse forms parse into a scratch message
// first, so a failed parse leaves the message unchanged).
void DefineMessageBytes(py::class_<MessageRef>& base) {
  auto serialize = [](const MessageRef& self, bool deterministic) {
    return Serialize(self.Get(), deterministic);
  };
  base.def("SerializeToString", serialize, py::kw_only(), py::arg("deterministic") = false)
      .def("SerializePartialToString", serialize, py::kw_only(), py::arg("deterministic") = false)
      .def("ParseFromString",
           [](const MessageRef& self, py::handle data) {
             std::string bytes = ReadBuffer(data);
             std::unique_ptr<pb::Message> tmp = ParseAs(self, bytes);
             pb::Message* m = self.Mutable();
             m->GetReflection()->Swap(m, tmp.get());
             return bytes.size();
           })
      .def("MergeFromString",
           [](const MessageRef& self, py::handle data) {
             std::string bytes = ReadBuffer(data);
             self.Mutable()->MergeFrom(*ParseAs(self, bytes));
             return bytes.size();
           })
      .def("ByteSize", [](const MessageRef& self) { return self.Get().ByteSizeLong(); })
      .def("IsInitialized", [](const MessageRef& self) { return self.Get().IsInitialized(); })
      .def("DiscardUnknownFields",
           [](const MessageRef& self) { self.Mutable()->DiscardUnknownFields(); });
}

// Message as a Python object: comparison, text, copies, pickling; unhashable (mutable).
void DefineMessageProtocol(py::class_<MessageRef>& base) {
  base.def("__eq__",
           [](const MessageRef& self, py::handle other) -> py::object {
             if (!IsOurMessage(other)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(MessagesEqual(self.Get(), other.cast<const MessageRef&>().Get()));
           })
      .def("__ne__",
           [](const MessageRef& self, py::handle other) -> py::object {
             if (!IsOurMessage(other)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(!MessagesEqual(self.Get(), other.cast<const MessageRef&>().Get()));
           })
      .def("__str__", [](const MessageRef& self) { return TextFormat(self.Get()); })
      .def("__repr__", [](const MessageRef& self) { return TextFormat(self.Get()); })
      .def("__copy__", &CopyToPython)
      .def("__deepcopy__", [](const MessageRef& self, py::handle) { return CopyToPython(self); })
      .def("__reduce__",
           [](py::handle self) {
             // Unpickled by onnx_light.onnx._unpickle(qualified class name, bytes).
             return py::make_tuple(
                 py::module_::import("onnx_light.onnx").attr("_unpickle"),
                 py::make_tuple(py::type::handle_of(self).attr("__qualname__"),
                                Serialize(self.cast<const MessageRef&>().Get(), false)));
           })
      .def(
          "_cpp_address",
          [](const MessageRef& self) { return reinterpret_cast<uintptr_t>(self.Find()); },
          "Address of the C++ message (0 while unset): lets tests prove the runtime shares it.")
      .attr("__hash__") = py::none();
}

// Message: the base class of every generated message class.
py::class_<MessageRef> RegisterMessageBase(py::module_& proto) {
  py::class_<MessageRef> base(proto, "Message",
                              "Base class of every generated message class; a view of a C++ "
                              "message whose tree it keeps alive.");
  base.def(py::init([](const RefToken& token) { return token.ref; }));
  DefineMessageFields(base);
  DefineMessageBytes(base);
  DefineMessageProtocol(base);
  SetBaseInit(base.attr("__init__"));
  return base;
}

// Model files and the onnx-light extension checks.
void RegisterModelFunctions(py::module_& proto) {
  proto.def(
      "load_model_file",
      [](const std::string& path) { return MessageToPython(core::LoadModel(path)); },
      py::arg("path"),
      "Loads a model file (external data stays in its files, resolved relative to it).");
  proto.def(
      "load_model_bytes",
      [](py::handle data) { return MessageToPython(core::LoadModelFromBytes(ReadBuffer(data))); },
      py::arg("data"), "Parses a serialized model.");
  proto.def(
      "save_model_file",
      [](py::handle model, const std::string& path) {
        core::SaveModel(*ProtoFromPython<ModelProto>(model, "model"), path);
      },
      py::arg("model"), py::arg("path"), "Writes a model in binary protobuf form.");
  proto.def(
      "extension_fields", [](const MessageRef& msg) { return core::ExtensionFields(msg.Get()); },
      "Paths of the onnx-light extension fields (numbers 1000-1099) set anywhere in a message, "
      "with the names of their entries.");
  proto.def(
      "check_no_extensions",
      [](const MessageRef& msg, const std::string& target) {
        core::CheckNoExtensions(msg.Get(), target);
      },
      py::arg("message"), py::arg("target"),
      "Raises ValueError naming every onnx-light extension `message` uses: `target` (a "
      "standard ONNX consumer) cannot preserve them.");
}

// One Python class per message of onnx_light.proto (nested ones inside theirs), its enums.
void RegisterMessageClasses(py::module_& proto, const py::class_<MessageRef>& base) {
  py::handle meta = reinterpret_cast<PyObject*>(Py_TYPE(base.ptr()));
  const pb::FileDescriptor* file = ModelProto::descriptor()->file();
  for (int i = 0; i < file->message_type_count(); ++i) {
    const pb::Descriptor* d = file->message_type(i);
    proto.attr(d->name().c_str()) = MakeClass(meta, base, d, "");
  }
  for (int i = 0; i < file->enum_type_count(); ++i) AddEnum(proto, file->enum_type(i));
}

}  // namespace

void RegisterProto(py::module_& m) {
  py::module_ proto =
      m.def_submodule("proto", "Message classes of onnx_light.proto backed by the C++ messages");
  py::class_<RefToken>(proto, "_RefToken");
  RegisterFieldDescriptor(proto);
  RegisterMessageDescriptor(proto);
  RegisterEnumType(proto);
  RegisterRepeatedScalar(proto);
  RegisterRepeatedComposite(proto);
  const py::class_<MessageRef> base = RegisterMessageBase(proto);
  RegisterModelFunctions(proto);
  RegisterMessageClasses(proto, base);
}

}  // namespace onnx_light::python
