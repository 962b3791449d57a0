// Zero-copy exchange of tensors with DLPack (0.6, unversioned DLManagedTensor).
//
// Import adopts the producer's bytes: the returned Tensor's owner calls the producer's
// deleter once, when the last handle sharing the bytes dies. Export shares the tensor's
// owner with the consumer: the payload stays alive until the consumer calls the deleter.
// Only compact row-major CPU tensors cross the boundary; anything else is rejected rather
// than copied.
#pragma once

#include <dlpack/dlpack.h>

#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace onnx_light::core::runtime {

// DLPack 0.8 added kDLBool = 6; the 0.6 header lacks it, producers (NumPy, PyTorch) use it.
inline constexpr uint8_t kDLPackBoolCode = 6;

// Maps a DLPack element type to a DataType; throws kInvalidArgument naming `name` for
// vector lanes and types without an ONNX counterpart here (complex, opaque, odd widths).
DataType DataTypeFromDLPack(DLDataType type, const std::string& name);
// The DLPack element type of `type`; throws kInvalidArgument naming `name` for strings,
// packed sub-byte types and float8/float4.
DLDataType DataTypeToDLPack(DataType type, const std::string& name);

// Adopts `managed` without copying. On success the Tensor owns `managed` (its deleter runs
// when the last handle dies). On error (kInvalidArgument: non-CPU device, unsupported dtype,
// noncontiguous strides, misaligned data) nothing is adopted: the caller still owns
// `managed` and must release it.
Tensor TensorFromDLPack(DLManagedTensor* managed, std::string name);

// Exports `tensor` without copying: the DLManagedTensor holds a copy of the tensor's owner
// and its own shape/strides arrays; its deleter releases both. Throws kInvalidArgument for
// string tensors, types DLPack cannot describe and ownerless tensors (the consumer's
// lifetime is unknown). DLPack 0.6 has no read-only flag: consumers must not write.
DLManagedTensor* TensorToDLPack(const Tensor& tensor);

}  // namespace onnx_light::core::runtime
