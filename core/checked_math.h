// Checked arithmetic for element counts and byte sizes. Shapes come from models and feeds,
// so their products can overflow int64/size_t; a wrapped count then passes payload checks
// and a kernel reads or writes out of bounds. Every count or size computed from
// user-controlled dimensions goes through these helpers, which throw Error instead.
//
// A shape is valid only if the product of its non-zero dimensions fits in int64 (a zero
// dimension does not excuse the others): every sub-product a kernel takes over the
// dimensions of a tensor that exists (outer/inner counts) then fits too.
//
// max_tensor_bytes: the largest tensor one allocation may request. Tensor's allocating
// constructor checks it against a thread-local limit that the executor sets per run
// (RuntimeSessionOptions::max_tensor_bytes); outside a run the process default applies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/dtype.h"

namespace onnx_light::core {

// a * b and a + b for counts (>= 0); throw kInvalidArgument naming `what` on overflow or
// a negative operand.
int64_t CheckedMul(int64_t a, int64_t b, std::string_view what);
int64_t CheckedAdd(int64_t a, int64_t b, std::string_view what);
// a + b for signed offsets (pads, starts): throws kInvalidArgument only on overflow.
int64_t CheckedSignedAdd(int64_t a, int64_t b, std::string_view what);
// The element count of `dims` (each >= 0), checked as described above.
int64_t CheckedNumel(std::span<const int64_t> dims, std::string_view what);
// Bytes of `count` elements of `type` (packed for sub-byte types), checked to fit int64.
size_t CheckedStorageBytes(DataType type, int64_t count, std::string_view what);
// A count from a floating-point value (Range, Resize): finite, >= 0 and below 2^62.
int64_t CheckedCountFromDouble(double value, std::string_view what);

// Half the physical memory (a tensor larger than that is a runaway, not a workload).
size_t DefaultMaxTensorBytes();
// The limit in force on this thread (SIZE_MAX = unlimited).
size_t MaxTensorBytes();
// Throws kResourceExhausted when `bytes` exceed the limit in force, naming `what`.
void CheckTensorBytes(size_t bytes, std::string_view what);

// Sets this thread's limit for its lifetime (restores the previous one). `limit` 0 keeps the
// limit in force.
class ScopedMaxTensorBytes {
 public:
  explicit ScopedMaxTensorBytes(size_t limit);
  ~ScopedMaxTensorBytes();
  ScopedMaxTensorBytes(const ScopedMaxTensorBytes&) = delete;
  ScopedMaxTensorBytes& operator=(const ScopedMaxTensorBytes&) = delete;

 private:
  size_t previous_;
  bool active_;
};

}  // namespace onnx_light::core
