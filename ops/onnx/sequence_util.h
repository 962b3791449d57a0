// Helpers shared by the sequence kernels (sequence_*.cc): position inputs, element checks
// and the axis block copies of ConcatFromSequence / SplitToSequence.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/runtime_value.h"
#include "executor/attributes.h"
#include "executor/kernel.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops::sequence {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::RuntimeSequence;
using core::runtime::RuntimeValue;
using core::runtime::Shape;
using core::runtime::Tensor;

inline const RuntimeValue& SequenceInput(const KernelCall& call, size_t i) {
  const RuntimeValue& v = call.input_value(i);
  if (!v.is_sequence())
    call.Fail("input " + std::to_string(i) + " must be a sequence, got a " +
              RuntimeValue::KindName(v.kind()));
  return v;
}

// A scalar INT32/INT64 position input.
inline int64_t ReadIndex(const KernelCall& call, size_t i, const char* what) {
  const Tensor& t = call.input(i);
  if (t.numel() != 1 || (t.dtype() != DataType::kInt64 && t.dtype() != DataType::kInt32))
    call.Fail(std::string(what) + " must be a scalar INT32 or INT64, got " +
              core::DataTypeName(t.dtype()) + " " + core::runtime::ShapeToString(t.shape()));
  return t.dtype() == DataType::kInt64 ? *t.data<int64_t>() : *t.data<int32_t>();
}

// Normalises `pos` into [0, size) (or [0, size] when `allow_end`), naming it on failure.
inline size_t NormalizePosition(const KernelCall& call, int64_t pos, size_t size, bool allow_end) {
  const int64_t n = static_cast<int64_t>(size);
  const int64_t p = pos < 0 ? pos + n : pos;
  if (p < 0 || p > n || (p == n && !allow_end))
    call.Fail("position " + std::to_string(pos) + " is out of range for a sequence of length " +
              std::to_string(size));
  return static_cast<size_t>(p);
}

// The element type (dtype) a sequence holds: from its first element, else its declared type.
inline DataType SequenceDtype(const RuntimeValue& seq) {
  if (!seq.elements().empty() && seq.elements()[0].is_tensor())
    return seq.elements()[0].tensor().dtype();
  const auto& type = seq.sequence_elem_type();
  if (type && type->has_tensor_type())
    return static_cast<DataType>(type->tensor_type().elem_type());
  return DataType::kUndefined;
}

inline std::shared_ptr<const TypeProto> TensorElemType(DataType dtype) {
  auto type = std::make_shared<TypeProto>();
  type->mutable_tensor_type()->set_elem_type(static_cast<int32_t>(dtype));
  return type;
}

inline size_t ElementBytes(const KernelCall& call, DataType dtype) {
  const int bits = core::ElementBits(dtype);
  if (bits <= 0 || bits % 8 != 0)
    call.Fail("tensors of " + core::DataTypeName(dtype) + " are not supported here");
  return static_cast<size_t>(bits / 8);
}

inline int64_t Product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

}  // namespace onnx_light::ops::sequence
