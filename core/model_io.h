// Loading and saving models in the binary protobuf format (standard .onnx files plus the
// onnx-light extensions). External tensor data stays in its files: TensorFromProto maps it
// (core/tensor_proto.h) relative to the directory recorded here by LoadModel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core {

// Parses a model file. Throws kInvalidArgument if the file cannot be read, kInvalidModel if
// it is not a model or an external data reference escapes the model's directory or lies
// past the end of its file, kNotImplemented for files of 2 GB or more (protobuf's limit:
// keep large weights in external data). Records the file's directory (ModelBaseDir).
std::shared_ptr<ModelProto> LoadModel(const std::string& path);
// Parses serialized model bytes. External data cannot be resolved (no directory).
std::shared_ptr<ModelProto> LoadModelFromBytes(std::string_view bytes);

// Serializes `model`; throws kNotImplemented when it would reach 2 GB. Both count one
// serialization (ModelSerializationCount).
std::string SerializeModel(const ModelProto& model);
void SaveModel(const ModelProto& model, const std::string& path);

// Serializations done by this process: tests assert that running a session or a persistent
// state never serializes its model.
uint64_t ModelSerializationCount();

// The directory of the file `model` was loaded from by LoadModel (as long as that shared
// pointer lives), or "" for models from bytes or built in memory. Pass it as TensorFromProto's
// base_dir.
std::string ModelBaseDir(const ModelProto& model);

}  // namespace onnx_light::core
