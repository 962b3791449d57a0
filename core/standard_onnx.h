// Export to standard ONNX (spec "Serialized cache values", "Structured feedback"): the
// onnx-light extensions (field numbers 1000-1099: persistent bindings, paged-cache and encoded
// initializers, struct types, shared parameters) have no meaning in standard ONNX, ORT or the
// ONNX text format. An export that cannot preserve them is refused, never silently stripped.
#pragma once

#include <string>
#include <vector>

namespace google::protobuf {
class Message;
}  // namespace google::protobuf

namespace onnx_light {
class ModelProto;
}  // namespace onnx_light

namespace onnx_light::core {

// Every onnx-light extension field set anywhere in `message`, as a path with the names of
// its entries: "graph.persistent_bindings ('past' <- 'present')",
// "graph.paged_cache_initializer ('cache')", "graph.input[0].type.struct_type".
std::vector<std::string> ExtensionFields(const google::protobuf::Message& message);

// Throws Error(kInvalidModel) listing ExtensionFields(message) when there are any:
// "<target> cannot preserve the onnx-light extensions of this <message type>: ...".
void CheckNoExtensions(const google::protobuf::Message& message, const std::string& target);

// The binary protobuf of `model` as a plain ONNX model (readable by the onnx package and ORT
// with the same meaning). Refuses a model using any extension (CheckNoExtensions).
std::string ExportStandardOnnx(const ModelProto& model);

}  // namespace onnx_light::core
