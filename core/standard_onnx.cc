#include "core/standard_onnx.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

constexpr int kFirstExtension = 1000;
constexpr int kLastExtension = 1099;
constexpr int kShownEntries = 4;  // names listed per extension field before "..."

// "'name'" for a named entry, "'in' <- 'out'" for a binding, empty otherwise.
std::string EntryName(const pb::Message& entry) {
  if (entry.GetDescriptor() == PersistentBindingProto::descriptor()) {
    const auto& b = static_cast<const PersistentBindingProto&>(entry);
    return "'" + b.input_name() + "' <- '" + b.output_name() + "'";
  }
  const FD* name = entry.GetDescriptor()->FindFieldByName("name");
  if (name == nullptr || name->type() != FD::TYPE_STRING || name->is_repeated()) return "";
  const std::string value = entry.GetReflection()->GetString(entry, name);
  return value.empty() ? "" : "'" + value + "'";
}

// "path (a, b, ...)" for a set extension field.
std::string Describe(const pb::Message& m, const FD* f, const std::string& path) {
  if (!f->is_repeated() || f->cpp_type() != FD::CPPTYPE_MESSAGE) return path;
  const pb::Reflection* r = m.GetReflection();
  std::string names;
  const int n = r->FieldSize(m, f);
  for (int i = 0; i < n && i < kShownEntries; ++i) {
    const std::string entry = EntryName(r->GetRepeatedMessage(m, f, i));
    if (!entry.empty()) names += (names.empty() ? "" : ", ") + entry;
  }
  if (names.empty()) return path;
  return path + " (" + names + (n > kShownEntries ? ", ..." : "") + ")";
}

void Find(const pb::Message& m, const std::string& path, std::vector<std::string>* out) {
  std::vector<const FD*> fields;
  const pb::Reflection* r = m.GetReflection();
  r->ListFields(m, &fields);
  for (const FD* f : fields) {
    const std::string here = path.empty() ? f->name() : path + "." + f->name();
    if (f->number() >= kFirstExtension && f->number() <= kLastExtension) {
      out->push_back(Describe(m, f, here));
      continue;
    }
    if (f->cpp_type() != FD::CPPTYPE_MESSAGE) continue;
    if (!f->is_repeated()) {
      Find(r->GetMessage(m, f), here, out);
      continue;
    }
    for (int i = 0; i < r->FieldSize(m, f); ++i)
      Find(r->GetRepeatedMessage(m, f, i), here + "[" + std::to_string(i) + "]", out);
  }
}

}  // namespace

std::vector<std::string> ExtensionFields(const pb::Message& message) {
  std::vector<std::string> out;
  Find(message, "", &out);
  return out;
}

void CheckNoExtensions(const pb::Message& message, const std::string& target) {
  const std::vector<std::string> found = ExtensionFields(message);
  if (found.empty()) return;
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
  Throw(ErrorCode::kInvalidModel,
        target + " cannot preserve the onnx-light extensions this " +
            message.GetDescriptor()->name() + " uses: " + list +
            " (refused rather than silently dropped; keep the onnx-light binary model)");
}

std::string ExportStandardOnnx(const ModelProto& model) {
  CheckNoExtensions(model, "standard ONNX export");
  std::string bytes;
  OL_CHECK(model.SerializeToString(&bytes), ErrorCode::kInvalidModel,
           "standard ONNX export: the model cannot be serialized (missing required fields?)");
  return bytes;
}

}  // namespace onnx_light::core
