#include "core/dlpack.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"

namespace onnx_light::core::runtime {

namespace {

std::string DLTypeString(DLDataType type) {
  return "DLDataType(code=" + std::to_string(type.code) + ", bits=" + std::to_string(type.bits) +
         ", lanes=" + std::to_string(type.lanes) + ")";
}

std::string DeviceString(DLDevice device) {
  return "device_type=" + std::to_string(static_cast<int>(device.device_type)) +
         ", device_id=" + std::to_string(device.device_id);
}

// Owns an imported DLManagedTensor; the Tensor's shared owner points here.
struct ImportedDLPack {
  DLManagedTensor* managed = nullptr;
  ImportedDLPack() = default;
  ImportedDLPack(const ImportedDLPack&) = delete;
  ImportedDLPack& operator=(const ImportedDLPack&) = delete;
  ~ImportedDLPack() {
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
};

// manager_ctx of an exported tensor: keeps the payload owner and the metadata arrays.
struct ExportedDLPack {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<const void> owner;
};

void DeleteExported(DLManagedTensor* self) {
  delete static_cast<ExportedDLPack*>(self->manager_ctx);
}

}  // namespace

DataType DataTypeFromDLPack(DLDataType type, const std::string& name) {
  auto unsupported = [&]() -> DataType {
    Throw(ErrorCode::kInvalidArgument,
          "DLPack tensor '" + name + "' has unsupported element type " + DLTypeString(type));
  };
  if (type.lanes != 1) return unsupported();
  switch (type.code) {
    case kDLFloat:
      if (type.bits == 16) return DataType::kFloat16;
      if (type.bits == 32) return DataType::kFloat;
      if (type.bits == 64) return DataType::kDouble;
      break;
    case kDLBfloat:
      if (type.bits == 16) return DataType::kBFloat16;
      break;
    case kDLInt:
      if (type.bits == 8) return DataType::kInt8;
      if (type.bits == 16) return DataType::kInt16;
      if (type.bits == 32) return DataType::kInt32;
      if (type.bits == 64) return DataType::kInt64;
      break;
    case kDLUInt:
      if (type.bits == 8) return DataType::kUint8;
      if (type.bits == 16) return DataType::kUint16;
      if (type.bits == 32) return DataType::kUint32;
      if (type.bits == 64) return DataType::kUint64;
      break;
    case kDLPackBoolCode:
      if (type.bits == 8) return DataType::kBool;
      break;
    default:
      break;
  }
  return unsupported();
}

DLDataType DataTypeToDLPack(DataType type, const std::string& name) {
  auto make = [](uint8_t code, uint8_t bits) { return DLDataType{code, bits, 1}; };
  switch (type) {
    case DataType::kFloat16:
      return make(kDLFloat, 16);
    case DataType::kFloat:
      return make(kDLFloat, 32);
    case DataType::kDouble:
      return make(kDLFloat, 64);
    case DataType::kBFloat16:
      return make(kDLBfloat, 16);
    case DataType::kInt8:
      return make(kDLInt, 8);
    case DataType::kInt16:
      return make(kDLInt, 16);
    case DataType::kInt32:
      return make(kDLInt, 32);
    case DataType::kInt64:
      return make(kDLInt, 64);
    case DataType::kUint8:
      return make(kDLUInt, 8);
    case DataType::kUint16:
      return make(kDLUInt, 16);
    case DataType::kUint32:
      return make(kDLUInt, 32);
    case DataType::kUint64:
      return make(kDLUInt, 64);
    case DataType::kBool:
      return make(kDLPackBoolCode, 8);
    default:
      Throw(ErrorCode::kInvalidArgument, "tensor '" + name + "' of type " + DataTypeName(type) +
                                             " cannot be exported through DLPack");
  }
}

Tensor TensorFromDLPack(DLManagedTensor* managed, std::string name) {
  OL_CHECK(managed != nullptr, ErrorCode::kInvalidArgument,
           "DLPack tensor '" + name + "' is a null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  OL_CHECK(dl.device.device_type == kDLCPU, ErrorCode::kInvalidArgument,
           "DLPack tensor '" + name + "' is not on the CPU (" + DeviceString(dl.device) +
               "); only CPU tensors are accepted");
  const DataType dtype = DataTypeFromDLPack(dl.dtype, name);
  OL_CHECK(
      dl.ndim >= 0 && (dl.ndim == 0 || dl.shape != nullptr), ErrorCode::kInvalidArgument,
      "DLPack tensor '" + name + "' has an invalid shape (ndim=" + std::to_string(dl.ndim) + ")");
  Shape shape(dl.shape, dl.shape + dl.ndim);
  const int64_t numel = ShapeNumel(shape);  // throws on a negative dimension or overflow
  StorageBytes(dtype, numel);               // the byte extent must fit too (throws)

  // Compact row-major: every dimension of size > 1 has the stride of the dimensions after
  // it. Size-1 dimensions are never stepped over, so their stride is irrelevant (PyTorch
  // reports arbitrary ones); an empty tensor has no layout at all.
  if (dl.strides != nullptr && numel > 0) {
    int64_t expected = 1;
    for (int i = dl.ndim - 1; i >= 0; --i) {
      const int64_t dim = dl.shape[i];
      OL_CHECK(dim == 1 || dl.strides[i] == expected, ErrorCode::kInvalidArgument,
               "DLPack tensor '" + name + "' is noncontiguous (shape " + ShapeToString(shape) +
                   ", strides " + ShapeToString(Shape(dl.strides, dl.strides + dl.ndim)) +
                   "); only compact row-major tensors are accepted without a copy");
      expected *= dim;
    }
  }

  // The element data starts byte_offset bytes after `data` and must be aligned for its type.
  const size_t element_bytes = static_cast<size_t>(ElementBits(dtype) / 8);
  const auto base = reinterpret_cast<uintptr_t>(dl.data);
  OL_CHECK(base != 0 || (numel == 0 && dl.byte_offset == 0), ErrorCode::kInvalidArgument,
           "DLPack tensor '" + name + "' has null data with " + std::to_string(numel) +
               " elements and byte_offset " + std::to_string(dl.byte_offset));
  OL_CHECK(dl.byte_offset <= UINTPTR_MAX - base, ErrorCode::kInvalidArgument,
           "DLPack tensor '" + name + "' has byte_offset " + std::to_string(dl.byte_offset) +
               " past the end of the address space");
  const uintptr_t start = base + static_cast<uintptr_t>(dl.byte_offset);
  OL_CHECK(start % element_bytes == 0, ErrorCode::kInvalidArgument,
           "DLPack tensor '" + name + "' data (with byte_offset " + std::to_string(dl.byte_offset) +
               ") is not aligned to its " + std::to_string(element_bytes) + "-byte elements");

  // Allocated before taking ownership, so that a failure leaves `managed` with the caller.
  auto holder = std::make_shared<ImportedDLPack>();
  Tensor t = Tensor::Borrow(std::move(name), dtype, std::move(shape),
                            reinterpret_cast<const void*>(start), holder);
  holder->managed = managed;
  return t;
}

DLManagedTensor* TensorToDLPack(const Tensor& tensor) {
  OL_CHECK(tensor.defined(), ErrorCode::kInvalidArgument,
           "cannot export undefined tensor '" + tensor.name() + "' through DLPack");
  OL_CHECK(tensor.dtype() != DataType::kString, ErrorCode::kInvalidArgument,
           "string tensor '" + tensor.name() + "' cannot be exported through DLPack");
  const DLDataType dtype = DataTypeToDLPack(tensor.dtype(), tensor.name());
  OL_CHECK(tensor.has_owner(), ErrorCode::kInvalidArgument,
           "tensor '" + tensor.name() +
               "' has no storage owner and cannot be exported through DLPack without a copy");

  auto ctx = std::make_unique<ExportedDLPack>();
  ctx->shape = tensor.shape();
  ctx->strides = tensor.strides();  // a strided view is exported as one, without a copy
  ctx->owner = tensor.owner();

  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = const_cast<void*>(tensor.strided_data());
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(ctx->shape.size());
  dl.dtype = dtype;
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &DeleteExported;
  return &ctx.release()->managed;
}

}  // namespace onnx_light::core::runtime
