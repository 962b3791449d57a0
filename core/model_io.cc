#include "core/model_io.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor_proto.h"
#include "onnx_light.pb.h"

namespace onnx_light::core {

namespace {

std::atomic<uint64_t> serialization_count{0};

// Directory of each live model loaded from a file, keyed by its address; the entry is
// removed by the model's deleter.
std::mutex base_dirs_mutex;
std::unordered_map<const ModelProto*, std::string>& BaseDirs() {
  static auto* dirs = new std::unordered_map<const ModelProto*, std::string>();
  return *dirs;
}

std::unique_ptr<ModelProto> Parse(std::string_view bytes, const std::string& what) {
  OL_CHECK(bytes.size() < static_cast<size_t>(INT_MAX), ErrorCode::kNotImplemented,
           what + " is " + std::to_string(bytes.size()) +
               " bytes: protobuf models of 2 GB or more are not supported (store the weights "
               "as external data)");
  auto model = std::make_unique<ModelProto>();
  OL_CHECK(model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
           ErrorCode::kInvalidModel, what + " is not a valid binary ModelProto");
  return model;
}

template <typename Fn>
void ForEachTensor(const GraphProto& graph, Fn&& fn);

template <typename Fn>
void ForEachTensor(const AttributeProto& attr, Fn&& fn) {
  if (attr.has_t()) fn(attr.t());
  for (const auto& t : attr.tensors()) fn(t);
  if (attr.has_sparse_tensor()) {
    fn(attr.sparse_tensor().values());
    fn(attr.sparse_tensor().indices());
  }
  for (const auto& s : attr.sparse_tensors()) {
    fn(s.values());
    fn(s.indices());
  }
  if (attr.has_g()) ForEachTensor(attr.g(), fn);
  for (const auto& g : attr.graphs()) ForEachTensor(g, fn);
}

template <typename Fn>
void ForEachTensor(const GraphProto& graph, Fn&& fn) {
  for (const auto& t : graph.initializer()) fn(t);
  for (const auto& s : graph.sparse_initializer()) {
    fn(s.values());
    fn(s.indices());
  }
  for (const auto& node : graph.node())
    for (const auto& attr : node.attribute()) ForEachTensor(attr, fn);
}

// Checks every external reference up front (location, range) so that a broken model fails
// at load time rather than at its first run. Only stats the files; nothing is read.
void ValidateExternalData(const ModelProto& model, const std::string& base_dir) {
  std::unordered_map<std::string, uintmax_t> sizes;
  auto check = [&](const TensorProto& t) {
    if (t.data_location() != TensorProto::EXTERNAL) return;
    const runtime::ExternalDataRef ref = runtime::ResolveExternalData(t, base_dir);
    auto it = sizes.find(ref.path);
    if (it == sizes.end()) {
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(ref.path, ec);
      OL_CHECK(!ec, ErrorCode::kInvalidModel,
               "tensor '" + t.name() + "': cannot open external data file '" + ref.path +
                   "': " + ec.message());
      it = sizes.emplace(ref.path, size).first;
    }
    uintmax_t length = ref.length < 0 ? 0 : static_cast<uintmax_t>(ref.length);
    if (ref.length < 0 && IsKnownDataType(t.data_type())) {
      int64_t numel = 1;
      for (int64_t d : t.dims())
        numel = CheckedMul(numel, d < 0 ? 0 : d, "tensor '" + t.name() + "'");
      length = StorageBytes(static_cast<DataType>(t.data_type()), numel);
    }
    const uintmax_t end = static_cast<uintmax_t>(ref.offset) + length;
    OL_CHECK(static_cast<uintmax_t>(ref.offset) <= it->second && end <= it->second,
             ErrorCode::kInvalidModel,
             "tensor '" + t.name() + "': external data [" + std::to_string(ref.offset) + ", " +
                 std::to_string(end) + ") lies past the end of '" + ref.path + "' (" +
                 std::to_string(it->second) + " bytes)");
  };
  ForEachTensor(model.graph(), check);
  for (const auto& f : model.functions())
    for (const auto& node : f.node())
      for (const auto& attr : node.attribute()) ForEachTensor(attr, check);
}

}  // namespace

std::shared_ptr<ModelProto> LoadModel(const std::string& path) {
  // A directory opens as a stream of "size" 2^63 - 1, and a FIFO or device blocks or never
  // ends: only a regular file is read.
  std::error_code status_error;
  const auto status = std::filesystem::status(path, status_error);
  OL_CHECK(!std::filesystem::is_directory(status), ErrorCode::kInvalidArgument,
           "model file '" + path + "' is a directory: pass the .onnx file in it");
  OL_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status),
           ErrorCode::kInvalidArgument, "model file '" + path + "' is not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  OL_CHECK(in.good(), ErrorCode::kInvalidArgument,
           "cannot open model file '" + path + "': " + std::strerror(errno));
  const std::streamoff size = in.tellg();
  OL_CHECK(size >= 0, ErrorCode::kInvalidArgument, "cannot read model file '" + path + "'");
  OL_CHECK(size < static_cast<std::streamoff>(INT_MAX), ErrorCode::kNotImplemented,
           "model file '" + path + "' is " + std::to_string(size) +
               " bytes: protobuf models of 2 GB or more are not supported (store the weights "
               "as external data)");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  OL_CHECK(in.gcount() == size, ErrorCode::kInvalidArgument,
           "cannot read model file '" + path + "'");
  std::unique_ptr<ModelProto> parsed = Parse(bytes, "model file '" + path + "'");
  bytes = std::string();

  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  ValidateExternalData(*parsed, dir);
  // The deleter forgets the model's directory.
  ModelProto* raw = parsed.release();
  std::shared_ptr<ModelProto> model(raw, [](ModelProto* m) {
    {
      std::lock_guard<std::mutex> lock(base_dirs_mutex);
      BaseDirs().erase(m);
    }
    delete m;
  });
  std::lock_guard<std::mutex> lock(base_dirs_mutex);
  BaseDirs()[raw] = dir;
  return model;
}

std::shared_ptr<ModelProto> LoadModelFromBytes(std::string_view bytes) {
  return Parse(bytes, "model bytes");
}

std::string SerializeModel(const ModelProto& model) {
  const size_t size = model.ByteSizeLong();
  OL_CHECK(size < static_cast<size_t>(INT_MAX), ErrorCode::kNotImplemented,
           "the model serializes to " + std::to_string(size) +
               " bytes: protobuf models of 2 GB or more are not supported (store the weights "
               "as external data)");
  serialization_count.fetch_add(1, std::memory_order_relaxed);
  std::string out;
  OL_CHECK(model.SerializeToString(&out), ErrorCode::kInvalidModel,
           "the model could not be serialized (missing required fields?)");
  return out;
}

void SaveModel(const ModelProto& model, const std::string& path) {
  const std::string bytes = SerializeModel(model);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  OL_CHECK(out.good(), ErrorCode::kInvalidArgument,
           "cannot write model file '" + path + "': " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  OL_CHECK(out.good(), ErrorCode::kInvalidArgument,
           "writing model file '" + path + "' failed: " + std::strerror(errno));
}

uint64_t ModelSerializationCount() { return serialization_count.load(std::memory_order_relaxed); }

std::string ModelBaseDir(const ModelProto& model) {
  std::lock_guard<std::mutex> lock(base_dirs_mutex);
  auto it = BaseDirs().find(&model);
  return it == BaseDirs().end() ? std::string() : it->second;
}

}  // namespace onnx_light::core
