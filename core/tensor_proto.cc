#include "core/tensor_proto.h"

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

namespace {

template <typename Dst, typename Src>
Tensor FromTyped(const std::string& name, DataType dtype, Shape shape, const Src& values) {
  std::vector<Dst> out(values.begin(), values.end());
  return Tensor::FromVector(name, dtype, std::move(shape), std::move(out));
}

// ONNX stores 8/16-bit and packed types in int32_data, one element (or packed byte) each.
Tensor FromInt32Field(const TensorProto& proto, DataType dtype, Shape shape) {
  Tensor t(proto.name(), dtype, shape);
  const int64_t n = t.numel();
  const auto& v = proto.int32_data();
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
    if (bits == 8) dst[i] = static_cast<uint8_t>(x);
    else if (bits == 16) reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(x);
    else reinterpret_cast<int32_t*>(dst)[i] = x;
  }
  return t;
}

std::string ReadExternal(const TensorProto& proto, const std::string& base_dir, size_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& e : proto.external_data()) {
    if (e.key() == "location") location = e.value();
    else if (e.key() == "offset") offset = std::stoll(e.value());
    else if (e.key() == "length") length = std::stoll(e.value());
  }
  OL_CHECK(!location.empty(), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data has no location");
  const std::string path = base_dir.empty() ? location : base_dir + "/" + location;
  std::ifstream in(path, std::ios::binary);
  OL_CHECK(in.good(), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': cannot open external data file '" + path + "'");
  in.seekg(offset);
  std::string bytes(length >= 0 ? static_cast<size_t>(length) : want, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  OL_CHECK(static_cast<size_t>(in.gcount()) == bytes.size(), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "': external data file '" + path + "' is too short");
  return bytes;
}

}  // namespace

Tensor TensorFromProto(const TensorProto& proto, std::shared_ptr<const void> owner,
                       const std::string& base_dir) {
  OL_CHECK(IsKnownDataType(proto.data_type()), ErrorCode::kInvalidModel,
           "tensor '" + proto.name() + "' has unknown data type " + std::to_string(proto.data_type()));
  const auto dtype = static_cast<DataType>(proto.data_type());
  Shape shape(proto.dims().begin(), proto.dims().end());
  const int64_t n = ShapeNumel(shape);
  const std::string& name = proto.name();

  if (proto.data_location() == TensorProto::EXTERNAL) {
    std::string bytes = ReadExternal(proto, base_dir, StorageBytes(dtype, n));
    auto holder = std::make_shared<std::string>(std::move(bytes));
    OL_CHECK(holder->size() == StorageBytes(dtype, n), ErrorCode::kInvalidModel,
             "tensor '" + name + "': external data has the wrong size");
    Tensor t = Tensor::Borrow(name, dtype, shape, holder->data(), holder);
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
             "tensor '" + name + "': raw_data has " + std::to_string(raw.size()) + " bytes, expected " +
                 std::to_string(StorageBytes(dtype, n)) + " for " + DataTypeName(dtype) +
                 ShapeToString(shape));
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
    case DataType::kUint32: case DataType::kUint64:
      OL_CHECK(proto.uint64_data_size() == n, ErrorCode::kInvalidModel,
               "tensor '" + name + "': uint64_data size does not match its shape");
      return dtype == DataType::kUint64 ? FromTyped<uint64_t>(name, dtype, shape, proto.uint64_data())
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
  proto->set_raw_data(tensor.raw_data(), tensor.nbytes());
}

}  // namespace onnx_light::core::runtime
