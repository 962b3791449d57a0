// Conversions between TensorProto and Tensor. Raw data is borrowed (zero copy) when the
// proto outlives the tensor through `owner`; typed fields are converted into owned storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace onnx_light {
class TensorProto;
}

namespace onnx_light::core::runtime {

// `owner` keeps `proto` alive (e.g. the model's shared_ptr); null means convert into owned
// storage. External data (data_location EXTERNAL) is memory-mapped from `base_dir` (the
// model file's directory, see ModelBaseDir in core/model_io.h): the tensor borrows the
// mapping, whose owner is the file's MappedFile. Locations escaping `base_dir` (absolute or
// containing "..") and ranges past the end of the file are rejected (kInvalidModel).
Tensor TensorFromProto(const TensorProto& proto, std::shared_ptr<const void> owner = nullptr,
                       const std::string& base_dir = "");
void TensorToProto(const Tensor& tensor, TensorProto* proto);

// A read-only private mapping of a whole file. Open() returns the live mapping of that file
// if there is one (one mapping per file, shared by all its tensors); the mapping lasts as
// long as any owner handle does.
class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool Contains(const void* p) const {
    auto* b = static_cast<const uint8_t*>(p);
    return data_ != nullptr && b >= data_ && b < data_ + size_;
  }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Drops this process's pages of [data, data + bytes) when the range lies in a live
// MappedFile (whole pages inside the range only): the bytes stay readable, a later read
// faults them back in from the file, unchanged (the mapping is private and never written).
// For weights a kernel has copied into its own layout (a kept pack), so that the process
// does not hold both. Returns false, doing nothing, for any other memory.
bool ReleaseMappedPages(const void* data, size_t bytes);

// Where an external tensor's bytes are: `path` is base_dir/location after validation.
struct ExternalDataRef {
  std::string path;
  int64_t offset = 0;
  int64_t length = -1;  // -1: not given
};
// Parses and validates a tensor's external_data entries (location inside base_dir, offset
// and length non-negative). Does not touch the file.
ExternalDataRef ResolveExternalData(const TensorProto& proto, const std::string& base_dir);

}  // namespace onnx_light::core::runtime
