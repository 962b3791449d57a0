#include "python/bindings/proto_wrapper.h"

#include <google/protobuf/descriptor.h>

#include <unordered_map>

#include "core/error.h"
#include "executor/session_cache.h"

namespace onnx_light::python {

using core::ErrorCode;

void MessageTree::Detach(pb::Message* element) {
  removed_set.insert(element);
  removed.emplace_back(element);
}

MessageRef::~MessageRef() {
  // Two holders: this view and one other, which may be a cached session's handle on the
  // model (executor/session_cache.h): then nothing else can reach the model any more.
  if (tree_ == nullptr || tree_.use_count() != 2) return;
  tree_.reset();
  link_.reset();
  core::runtime::SessionCache::Default().Sweep();
}

MessageRef MessageRef::Root(std::shared_ptr<pb::Message> root) {
  MessageRef ref;
  ref.descriptor_ = root->GetDescriptor();
  ref.tree_ = std::make_shared<MessageTree>(std::move(root));
  return ref;
}

MessageRef MessageRef::Sub(const pb::FieldDescriptor* field) const {
  MessageRef ref;
  ref.tree_ = tree_;
  auto link = std::make_shared<MessageLink>();
  link->parent = link_;
  link->field = field;
  ref.link_ = std::move(link);
  ref.descriptor_ = field->message_type();
  return ref;
}

MessageRef MessageRef::Element(const pb::FieldDescriptor* field, int index) const {
  pb::Message* parent = Resolve();  // a view, not a write
  MessageRef ref;
  ref.tree_ = tree_;
  auto link = std::make_shared<MessageLink>();
  link->parent = link_;
  link->field = field;
  link->element = parent->GetReflection()->MutableRepeatedMessage(parent, field, index);
  link->index_hint = index;
  ref.link_ = std::move(link);
  ref.descriptor_ = field->message_type();
  return ref;
}

namespace {

// Finds `link->element` in its repeated field (the hint first, then a scan).
bool LocateElement(const pb::Message& parent, const MessageLink* link) {
  const pb::Reflection* refl = parent.GetReflection();
  const int n = refl->FieldSize(parent, link->field);
  if (link->index_hint < n &&
      &refl->GetRepeatedMessage(parent, link->field, link->index_hint) == link->element) {
    return true;
  }
  for (int i = 0; i < n; ++i) {
    if (&refl->GetRepeatedMessage(parent, link->field, i) == link->element) {
      link->index_hint = i;
      return true;
    }
  }
  return false;
}

[[noreturn]] void ThrowStale(const MessageLink* link) {
  core::Throw(ErrorCode::kFailedPrecondition,
              "this " + link->field->message_type()->name() + " view refers to an element of " +
                  link->field->full_name() +
                  " that no longer exists (an enclosing message was cleared, copied over or "
                  "parsed); take a new view from the field");
}

}  // namespace

const pb::Message* MessageRef::Find(const MessageLink* link) const {
  if (link == nullptr) return tree_->root.get();
  if (link->element != nullptr && tree_->removed_set.count(link->element)) return link->element;
  const pb::Message* parent = Find(link->parent.get());
  if (link->element != nullptr) {
    if (parent == nullptr || !LocateElement(*parent, link)) ThrowStale(link);
    return link->element;
  }
  if (parent == nullptr) return nullptr;
  const pb::Reflection* refl = parent->GetReflection();
  if (!refl->HasField(*parent, link->field)) return nullptr;
  return &refl->GetMessage(*parent, link->field);
}

pb::Message* MessageRef::Mutable(const MessageLink* link) const {
  if (link == nullptr) return tree_->root.get();
  if (link->element != nullptr) {
    if (tree_->removed_set.count(link->element)) return link->element;
    const pb::Message* parent = Find(link->parent.get());
    if (parent == nullptr || !LocateElement(*parent, link)) ThrowStale(link);
    return link->element;
  }
  pb::Message* parent = Mutable(link->parent.get());
  return parent->GetReflection()->MutableMessage(parent, link->field);
}

const pb::Message* MessageRef::Find() const { return Find(link_.get()); }

const pb::Message& MessageRef::Get() const {
  const pb::Message* m = Find();
  if (m != nullptr) return *m;
  return *pb::MessageFactory::generated_factory()->GetPrototype(descriptor_);
}

pb::Message* MessageRef::Mutable() const {
  OL_CHECK(tree_->readers.load(std::memory_order_acquire) == 0, ErrorCode::kFailedPrecondition,
           "cannot change this " + descriptor_->name() +
               ": a session or state run is reading its model (the model is immutable while "
               "sessions built from it run)");
  tree_->version.fetch_add(1, std::memory_order_relaxed);
  return Mutable(link_.get());
}

pb::Message* MessageRef::Resolve() const { return Mutable(link_.get()); }

// ---- class registry --------------------------------------------------------------------

namespace {

// Classes live as long as the interpreter: the registry holds strong references and is
// deliberately never destroyed (no Python object may be released after finalisation).
std::unordered_map<const pb::Descriptor*, PyObject*>& Registry() {
  static auto* registry = new std::unordered_map<const pb::Descriptor*, PyObject*>();
  return *registry;
}

PyObject*& BaseInit() {
  static PyObject* base_init = nullptr;
  return base_init;
}

}  // namespace

void RegisterMessageClass(const pb::Descriptor* descriptor, py::handle cls) {
  Registry()[descriptor] = cls.inc_ref().ptr();
}

py::handle MessageClass(const pb::Descriptor* descriptor) {
  auto it = Registry().find(descriptor);
  OL_CHECK(it != Registry().end(), ErrorCode::kRuntime,
           "no Python class registered for " + descriptor->full_name());
  return it->second;
}

void SetBaseInit(py::object base_init) { BaseInit() = base_init.release().ptr(); }

void InitMessageObject(py::handle self, const MessageRef& ref) {
  py::handle base_init = BaseInit();
  base_init(self, RefToken{ref});
}

py::object WrapMessage(const MessageRef& ref) {
  auto* type = reinterpret_cast<PyTypeObject*>(MessageClass(ref.descriptor()).ptr());
  py::tuple no_args;
  py::object obj = py::reinterpret_steal<py::object>(type->tp_new(type, no_args.ptr(), nullptr));
  if (!obj) throw py::error_already_set();
  InitMessageObject(obj, ref);
  return obj;
}

py::object MessageToPython(std::shared_ptr<pb::Message> root) {
  return WrapMessage(MessageRef::Root(std::move(root)));
}

std::shared_ptr<pb::Message> MessageFromPython(py::handle obj) {
  if (!py::isinstance<MessageRef>(obj)) {
    core::Throw(ErrorCode::kTypeError,
                std::string("expected an onnx_light proto message, got ") +
                    py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  }
  const MessageRef& ref = obj.cast<const MessageRef&>();
  pb::Message* msg = ref.Resolve();
  return std::shared_ptr<pb::Message>(ref.tree(), msg);
}

bool IsMessageObject(py::handle obj) { return py::isinstance<MessageRef>(obj); }

uint64_t MessageVersion(py::handle obj) {
  if (!py::isinstance<MessageRef>(obj)) return 0;
  return obj.cast<const MessageRef&>().tree()->version.load(std::memory_order_relaxed);
}

ModelGuard ModelGuard::Of(py::handle model) {
  ModelGuard guard;
  if (!py::isinstance<MessageRef>(model)) return guard;
  guard.tree_ = model.cast<const MessageRef&>().tree();
  guard.version_ = guard.tree_->version.load(std::memory_order_acquire);
  return guard;
}

void ModelGuard::Check(const char* what) const {
  if (tree_ == nullptr || tree_->version.load(std::memory_order_acquire) == version_) return;
  core::Throw(ErrorCode::kFailedPrecondition,
              std::string(what) +
                  ": the model was changed after this session/state was built from it (the "
                  "model is immutable for the session's lifetime); build a new session or "
                  "state from the edited model");
}

ModelGuard::Reading::Reading(const ModelGuard& guard, const char* what) {
  guard.Check(what);
  tree_ = guard.tree_;
  if (tree_ != nullptr) tree_->readers.fetch_add(1, std::memory_order_acq_rel);
}

ModelGuard::Reading::~Reading() {
  if (tree_ != nullptr) tree_->readers.fetch_sub(1, std::memory_order_acq_rel);
}

std::shared_ptr<pb::Message> ProtoFromPythonImpl(py::handle obj, const pb::Message& prototype,
                                                 const char* what) {
  const pb::Descriptor* desc = prototype.GetDescriptor();
  if (py::isinstance<MessageRef>(obj)) {
    const MessageRef& ref = obj.cast<const MessageRef&>();
    OL_CHECK(
        ref.descriptor() == desc, ErrorCode::kTypeError,
        std::string(what) + ": expected " + desc->name() + ", got " + ref.descriptor()->name());
    return MessageFromPython(obj);
  }
  std::string bytes;
  if (py::isinstance<py::bytes>(obj)) {
    bytes = obj.cast<std::string>();
  } else if (py::hasattr(obj, "SerializeToString") && py::hasattr(obj, "DESCRIPTOR") &&
             py::str(obj.attr("DESCRIPTOR").attr("name")).cast<std::string>() == desc->name()) {
    // A message of the `onnx` package: exchanged by bytes (its classes are not ours).
    bytes = obj.attr("SerializeToString")().cast<std::string>();
  } else {
    core::Throw(ErrorCode::kTypeError,
                std::string(what) + ": expected " + desc->name() +
                    " or its serialized bytes, got " +
                    py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
  }
  std::shared_ptr<pb::Message> msg(prototype.New());
  OL_CHECK(msg->ParseFromString(bytes), ErrorCode::kInvalidArgument,
           std::string(what) + ": bytes do not parse as " + desc->name());
  return msg;
}

}  // namespace onnx_light::python
