#include "core/tensor_proto.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "core/checked_math.h"
#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

template <typename Dst, typename Src>
Tensor FromTyped(const std::string& name, DataType dtype, Shape shape, const Src& values) {
  // The tensor views the vector: its bytes must cover the shape exactly (complex types
  // take two values per element, and nothing else checked their count).
  const size_t want = StorageBytes(dtype, ShapeNumel(shape));
  OL_CHECK(static_cast<size_t>(values.size()) * sizeof(Dst) == want, ErrorCode::kInvalidModel,
           "tensor '" + name + "': " + std::to_string(values.size()) + " typed values for " +
               DataTypeName(dtype) + ShapeToString(shape));
  std::vector<Dst> out(values.begin(), values.end());
  return Tensor::FromVector(name, dtype, std::move(shape), std::move(out));
}

// ONNX stores 8/16-bit and packed types in int32_data, one element (or packed byte) each.
Tensor FromInt32Field(const TensorProto& proto, DataType dtype, Shape shape) {
  const auto& v = proto.int32_data();
  // Checked before allocating: dims may promise far more elements than the field holds.
  const int64_t values_needed = ElementBits(dtype) < 8
                                    ? static_cast<int64_t>(StorageBytes(dtype, ShapeNumel(shape)))
                                    : ShapeNumel(shape);
  OL_CHECK(v.size() >= values_needed, ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': int32_data has " + std::to_string(v.size()) +
               " values for " + DataTypeName(dtype) + ShapeToString(shape));
  Tensor t(proto.name(), dtype, shape);
  const int64_t n = t.numel();
  auto* dst = static_cast<uint8_t*>(t.mutable_raw_data());
  const int bits = ElementBits(dtype);
  if (bits < 8) {
    // Packed types: int32_data holds packed bytes.
    const size_t bytes = t.nbytes();
    OL_CHECK(static_cast<size_t>(v.size()) >= bytes, ErrorCode::kInvalidModel,
             "tensor '" + proto.name() + "': int32_data too short");
    for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(v[static_cast<int>(i)]);
    return t;
  }
  OL_CHECK(v.size() == n, ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': int32_data has " + std::to_string(v.size()) +
               " values for " + std::to_string(n) + " elements");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = v[static_cast<int>(i)];
    if (bits == 8)
      dst[i] = static_cast<uint8_t>(x);
    else if (bits == 16)
      reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(x);
    else
      reinterpret_cast<int32_t*>(dst)[i] = x;
  }
  return t;
}

// Parses a non-negative decimal integer of an external_data entry.
int64_t ParseExternalInt(const TensorProto& proto, const std::string& key,
                         const std::string& value) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OL_CHECK(used == value.size() && !value.empty() && v >= 0, ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data " + key + " '" + value +
               "' is not a non-negative integer");
  return v;
}

struct MappingKey {
  dev_t dev;
  ino_t ino;
  bool operator==(const MappingKey&) const = default;
};
struct MappingKeyHash {
  size_t operator()(const MappingKey& k) const {
    return std::hash<uint64_t>()(static_cast<uint64_t>(k.dev) * 1000003u ^
                                 static_cast<uint64_t>(k.ino));
  }
};

std::mutex mappings_mutex;
std::unordered_map<MappingKey, std::weak_ptr<const MappedFile>, MappingKeyHash>& Mappings() {
  static auto* mappings =
      new std::unordered_map<MappingKey, std::weak_ptr<const MappedFile>, MappingKeyHash>();
  return *mappings;
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OL_CHECK(fd >= 0, ErrorCode::kInvalidModel,
           "cannot open external data file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    Throw(ErrorCode::kInvalidModel,
          "cannot stat external data file '" + path + "': " + std::strerror(err));
  }
  const MappingKey key{st.st_dev, st.st_ino};
  std::lock_guard<std::mutex> lock(mappings_mutex);
  auto& mappings = Mappings();
  if (auto it = mappings.find(key); it != mappings.end()) {
    if (auto live = it->second.lock()) {
      ::close(fd);
      return live;
    }
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      Throw(ErrorCode::kInvalidModel,
            "cannot map external data file '" + path + "': " + std::strerror(err));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  std::shared_ptr<const MappedFile> file(new MappedFile(path, data, size));
  mappings[key] = file;
  return file;
}

bool ReleaseMappedPages(const void* data, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(data);
  std::shared_ptr<const MappedFile> file;
  {
    std::lock_guard<std::mutex> lock(mappings_mutex);
    for (auto& [key, weak] : Mappings()) {
      auto live = weak.lock();
      if (live && live->Contains(begin) && bytes <= live->size() &&
          static_cast<size_t>(begin - live->data()) + bytes <= live->size()) {
        file = std::move(live);
        break;
      }
    }
  }
  if (file == nullptr) return false;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

ExternalDataRef ResolveExternalData(const TensorProto& proto, const std::string& base_dir) {
  ExternalDataRef ref;
  std::string location;
  for (const auto& e : proto.external_data()) {
    if (e.key() == "location")
      location = e.value();
    else if (e.key() == "offset")
      ref.offset = ParseExternalInt(proto, "offset", e.value());
    else if (e.key() == "length")
      ref.length = ParseExternalInt(proto, "length", e.value());
  }
  OL_CHECK(!location.empty(), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data has no location");
  OL_CHECK(!base_dir.empty(), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data '" + location +
               "' needs the model's directory (load the model from a file with LoadModel)");
  const std::filesystem::path rel(location);
  OL_CHECK(!rel.is_absolute() && !rel.has_root_name() && !rel.has_root_directory(),
           ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data location '" + location +
               "' is an absolute path; it must be relative to the model's directory");
  for (const auto& part : rel)
    OL_CHECK(part != "..", ErrorCode::kInvalidModel,
             "tensor '" + proto.name() + "': external data location '" + location +
                 "' escapes the model's directory ('..' is not allowed)");
  ref.path = (std::filesystem::path(base_dir) / rel).string();
  return ref;
}

Tensor TensorFromProto(const TensorProto& proto, std::shared_ptr<const void> owner,
                       const std::string& base_dir) {
  OL_CHECK(
      IsKnownDataType(proto.data_type()), ErrorCode::kInvalidModel,
      "tensor '" + proto.name() + "' has unknown data type " + std::to_string(proto.data_type()));
  const auto dtype = static_cast<DataType>(proto.data_type());
  Shape shape(proto.dims().begin(), proto.dims().end());
  const int64_t n = CheckedNumel(shape, "tensor '" + proto.name() + "'");
  const std::string& name = proto.name();

  if (proto.data_location() == TensorProto::EXTERNAL) {
    OL_CHECK(dtype != DataType::kString, ErrorCode::kNotImplemented,
             "tensor '" + name + "': external STRING data is not supported");
    const ExternalDataRef ref = ResolveExternalData(proto, base_dir);
    const size_t want = StorageBytes(dtype, n);
    OL_CHECK(ref.length < 0 || static_cast<size_t>(ref.length) == want, ErrorCode::kInvalidModel,
             "tensor '" + name + "': external data length " + std::to_string(ref.length) +
                 " does not match " + std::to_string(want) + " bytes for " + DataTypeName(dtype) +
                 ShapeToString(shape));
    auto file = MappedFile::Open(ref.path);
    const auto offset = static_cast<size_t>(ref.offset);
    OL_CHECK(offset <= file->size() && want <= file->size() - offset, ErrorCode::kInvalidModel,
             "tensor '" + name + "': external data [" + std::to_string(offset) + ", " +
                 std::to_string(offset + want) + ") lies past the end of '" + ref.path + "' (" +
                 std::to_string(file->size()) + " bytes)");
    if (want == 0) return Tensor(name, dtype, shape);
    const uint8_t* data = file->data() + offset;
    // Borrow the mapping when the element type's alignment holds; onnx writers may pack
    // small tensors at arbitrary offsets, and misaligned typed access is undefined.
    const size_t align = std::min<size_t>(std::max(ElementBits(dtype) / 8, 1), 8);
    if (reinterpret_cast<uintptr_t>(data) % align == 0)
      return Tensor::Borrow(name, dtype, shape, data, std::move(file));
    Tensor t(name, dtype, shape);
    std::memcpy(t.mutable_raw_data(), data, want);
    return t;
  }
  if (dtype == DataType::kString) {
    std::vector<std::string> s(proto.string_data().begin(), proto.string_data().end());
    OL_CHECK(static_cast<int64_t>(s.size()) == n, ErrorCode::kInvalidModel,
             "tensor '" + name + "': string_data size does not match its shape");
    return Tensor::FromStrings(name, shape, std::move(s));
  }
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    OL_CHECK(raw.size() == StorageBytes(dtype, n), ErrorCode::kInvalidModel,
             "tensor '" + name + "': raw_data has " + std::to_string(raw.size()) +
                 " bytes, expected " + std::to_string(StorageBytes(dtype, n)) + " for " +
                 DataTypeName(dtype) + ShapeToString(shape));
    if (owner != nullptr && reinterpret_cast<uintptr_t>(raw.data()) % 16 == 0)
      return Tensor::Borrow(name, dtype, shape, raw.data(), std::move(owner));
    Tensor t(name, dtype, shape);
    if (!raw.empty()) std::memcpy(t.mutable_raw_data(), raw.data(), raw.size());
    return t;
  }
  switch (dtype) {
    case DataType::kFloat: {
      if (n == 0) return Tensor(name, dtype, shape);
      OL_CHECK(proto.float_data_size() == n, ErrorCode::kInvalidModel,
               "tensor '" + name + "': float_data size does not match its shape");
      return FromTyped<float>(name, dtype, shape, proto.float_data());
    }
    case DataType::kDouble:
      OL_CHECK(proto.double_data_size() == n, ErrorCode::kInvalidModel,
               "tensor '" + name + "': double_data size does not match its shape");
      return FromTyped<double>(name, dtype, shape, proto.double_data());
    case DataType::kInt64:
      OL_CHECK(proto.int64_data_size() == n, ErrorCode::kInvalidModel,
               "tensor '" + name + "': int64_data size does not match its shape");
      return FromTyped<int64_t>(name, dtype, shape, proto.int64_data());
    case DataType::kUint32:
    case DataType::kUint64:
      OL_CHECK(proto.uint64_data_size() == n, ErrorCode::kInvalidModel,
               "tensor '" + name + "': uint64_data size does not match its shape");
      return dtype == DataType::kUint64
                 ? FromTyped<uint64_t>(name, dtype, shape, proto.uint64_data())
                 : FromTyped<uint32_t>(name, dtype, shape, proto.uint64_data());
    case DataType::kComplex64:
      return FromTyped<float>(name, dtype, shape, proto.float_data());
    case DataType::kComplex128:
      return FromTyped<double>(name, dtype, shape, proto.double_data());
    default:
      return FromInt32Field(proto, dtype, shape);
  }
}

void TensorToProto(const Tensor& tensor, TensorProto* proto) {
  proto->Clear();
  proto->set_name(tensor.name());
  proto->set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  if (tensor.dtype() == DataType::kString) {
    for (const auto& s : tensor.strings()) proto->add_string_data(s);
    return;
  }
  if (!tensor.contiguous()) return TensorToProto(tensor.Contiguous(), proto);
  proto->set_raw_data(tensor.raw_data(), tensor.nbytes());
}

}  // namespace onnx_light::core::runtime
