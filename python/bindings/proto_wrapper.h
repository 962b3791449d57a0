// Python proto objects without the Python protobuf package: every message class of
// proto/onnx_light.proto is a Python class generated at import time from its C++ descriptor,
// and every Python message object is a view of a C++ message (reflection does the work).
// A Python ModelProto therefore IS the C++ ModelProto the runtime reads: handing it to a
// session or a state copies nothing (MessageFromPython).
//
// Lifetime: every view holds the root of its message tree. A singular sub-message view is
// re-resolved through its parent on each access (so an unset sub-message reads as the
// default instance and is created on first write, as in protobuf's Python API). A repeated
// element view is the element itself, located again by pointer when its field changes.
// Elements removed with del/remove/pop/clear stay alive, detached, while the tree lives.
// The one difference from protobuf's Python API: after Clear/CopyFrom/ParseFromString of an
// enclosing message, views of its former repeated elements raise RuntimeError (or view the
// element that reused the storage) instead of staying detached copies.
#pragma once

#include <google/protobuf/message.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace onnx_light::python {

namespace py = pybind11;
namespace pb = google::protobuf;

// The root message and the detached elements removed from its repeated fields. `version`
// counts the writes made through Python views (MessageRef::Mutable): a cached session of the
// model (runtime.generate) is keyed by it, so a model changed from Python is compiled again
// instead of being read through a stale plan. Reads never change it.
struct MessageTree {
  explicit MessageTree(std::shared_ptr<pb::Message> root_message) : root(std::move(root_message)) {}
  std::shared_ptr<pb::Message> root;
  std::vector<std::unique_ptr<pb::Message>> removed;
  std::unordered_set<const pb::Message*> removed_set;
  std::atomic<uint64_t> version{0};
  // Runs (of sessions and states built on this tree) in progress: writes fail meanwhile.
  std::atomic<int> readers{0};
  void Detach(pb::Message* element);  // takes ownership
};

// Sessions and states read their model in place (initializers are zero-copy views of its
// bytes, often large or memory-mapped), and the spec makes the model immutable for their
// lifetime. An edit from Python (ParseFromString, CopyFrom, any field write) would leave the
// plan's views dangling, so instead of copying the model, a session or state built from a
// Python model remembers the tree's write version: a run after an edit is refused with an
// error, and a write while a run reads the model is refused too. Costs one atomic per run.
class ModelGuard {
 public:
  ModelGuard() = default;  // guards nothing: bytes and `onnx` models are private copies
  // Of one of our proto objects (its current version), or empty for anything else.
  static ModelGuard Of(py::handle model);

  // Throws kFailedPrecondition naming `what` if the model was written since the guard was
  // taken. Call with the GIL held.
  void Check(const char* what) const;

  // Check(), then counts a reader until destroyed (the GIL may be released meanwhile).
  class Reading {
   public:
    explicit Reading(const ModelGuard& guard, const char* what);
    ~Reading();
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;

   private:
    std::shared_ptr<MessageTree> tree_;
  };

 private:
  std::shared_ptr<MessageTree> tree_;
  uint64_t version_ = 0;
};

// How a view reaches its message from the root (null link: the root itself).
struct MessageLink {
  std::shared_ptr<const MessageLink> parent;
  const pb::FieldDescriptor* field = nullptr;
  pb::Message* element = nullptr;  // set for a repeated element
  mutable int index_hint = 0;
};

class MessageRef {
 public:
  static MessageRef Root(std::shared_ptr<pb::Message> root);

  MessageRef() = default;
  MessageRef(const MessageRef&) = default;
  MessageRef(MessageRef&&) = default;
  MessageRef& operator=(const MessageRef&) = default;
  MessageRef& operator=(MessageRef&&) = default;
  // The last view of a model whose compiled session the process-wide cache keeps: the cache
  // lets go of the session (its plans and packed weights) now, not at its next lookup.
  ~MessageRef();

  // View of the singular message field `field` (may be unset).
  MessageRef Sub(const pb::FieldDescriptor* field) const;
  // View of element `index` of the repeated message field `field` (must exist).
  MessageRef Element(const pb::FieldDescriptor* field, int index) const;

  const pb::Descriptor* descriptor() const { return descriptor_; }
  const std::shared_ptr<MessageTree>& tree() const { return tree_; }
  bool is_root() const { return link_ == nullptr; }

  const pb::Message* Find() const;  // null when an enclosing singular field is unset
  const pb::Message& Get() const;   // the default instance when unset
  // For a write: sets the presence of every enclosing field and advances tree()->version.
  pb::Message* Mutable() const;
  // The message itself, to hand to C++ readers (sets presence; not counted as a write).
  pb::Message* Resolve() const;

 private:
  const pb::Message* Find(const MessageLink* link) const;
  pb::Message* Mutable(const MessageLink* link) const;

  std::shared_ptr<MessageTree> tree_;
  std::shared_ptr<const MessageLink> link_;
  const pb::Descriptor* descriptor_ = nullptr;
};

// The C++ message behind a Python proto object, shared without copying (the result keeps the
// object's tree alive). Throws TypeError for anything else.
std::shared_ptr<pb::Message> MessageFromPython(py::handle obj);
// Whether `obj` is one of our proto objects (a view of a C++ message), and its tree's write
// version (0 for anything else).
bool IsMessageObject(py::handle obj);
uint64_t MessageVersion(py::handle obj);

// A message of type T from: one of our proto objects (no copy), bytes (parsed), or a message
// of the `onnx` Python package with the same name (parsed from its serialization). `what`
// names the argument in errors.
template <typename T>
std::shared_ptr<T> ProtoFromPython(py::handle obj, const char* what);

// Wraps `root` as an object of its generated Python class (no copy).
py::object MessageToPython(std::shared_ptr<pb::Message> root);
// Wraps a view.
py::object WrapMessage(const MessageRef& ref);

// Class registry filled by RegisterProto: one generated Python class per descriptor.
struct RefToken {
  MessageRef ref;
};
void RegisterMessageClass(const pb::Descriptor* descriptor, py::handle cls);
py::handle MessageClass(const pb::Descriptor* descriptor);
void SetBaseInit(py::object base_init);
// Runs the base class __init__ on a new instance `self` so that it views `ref`.
void InitMessageObject(py::handle self, const MessageRef& ref);

// Implementation detail of ProtoFromPython.
std::shared_ptr<pb::Message> ProtoFromPythonImpl(py::handle obj, const pb::Message& prototype,
                                                 const char* what);

template <typename T>
std::shared_ptr<T> ProtoFromPython(py::handle obj, const char* what) {
  return std::static_pointer_cast<T>(ProtoFromPythonImpl(obj, T::default_instance(), what));
}

}  // namespace onnx_light::python
