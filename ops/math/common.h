// Shared helpers for the numeric kernels: dtype conversion at the edges (FLOAT16/BFLOAT16
// are computed in float), error messages that name the node, broadcasting and a parallel
// loop (executor/parallel.h: the caller's task arena, the session's inside a run).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "executor/kernel.h"
#include "executor/parallel.h"

namespace onnx_light::ops::math {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

// Throws kNotImplemented: "<Op> node '<name>': <what> of type <DTYPE> is not supported".
[[noreturn]] void ThrowUnsupportedType(const onnx_light::NodeProto& node, const std::string& what,
                                       DataType dtype);
// Throws kInvalidArgument naming the node (like KernelCall::Fail, usable without a call).
[[noreturn]] void ThrowBadInput(const onnx_light::NodeProto& node, const std::string& message);

bool IsHalfType(DataType t);   // FLOAT16 or BFLOAT16
bool IsFloatType(DataType t);  // FLOAT, FLOAT16 or BFLOAT16: computed in float

// Element conversion for FLOAT, FLOAT16 and BFLOAT16 storage.
void ToFloat(DataType type, const void* src, float* dst, int64_t n);
void FromFloat(const float* src, DataType type, void* dst, int64_t n);

// ToFloat / FromFloat of a whole tensor's n values, in parallel chunks when n is large (a
// FLOAT16 prompt's [512, 4864] MLP gate converted on one thread took longer than its kernel).
void ToFloatParallel(DataType type, const void* src, float* dst, int64_t n);
void FromFloatParallel(const float* src, DataType type, void* dst, int64_t n);

// Columns [offset, offset + n) of the row-major FLOAT [m, width] product `c` into `out`
// ([m, n] of `type`: FLOAT, FLOAT16 or BFLOAT16), rows in parallel: how the grouped products
// (MatMulGroup, MatMulNBitsGroup) hand each weight's output its share of one product.
void CopyColumns(const float* c, int64_t m, int64_t width, int64_t offset, int64_t n, DataType type,
                 void* out);

// A float view of a FLOAT/FLOAT16/BFLOAT16 tensor: FLOAT is read in place (no copy), the
// 16-bit types are converted once into a buffer of the default allocator (uninitialised,
// its large blocks reused from call to call rather than faulted in afresh).
class FloatView {
 public:
  explicit FloatView(const Tensor& t);
  const float* data() const { return ptr_; }

 private:
  std::shared_ptr<void> buffer_;
  const float* ptr_ = nullptr;
};

// A float destination for an output of type FLOAT/FLOAT16/BFLOAT16: FLOAT is written in
// place; the 16-bit types are written to such a buffer and converted by Finish().
class FloatSink {
 public:
  explicit FloatSink(Tensor& out);
  float* data() { return ptr_; }
  void Finish();

 private:
  Tensor& out_;
  std::shared_ptr<void> buffer_;
  float* ptr_ = nullptr;
};

// Normalises an axis in [-rank, rank) (or [-rank-1, rank] when `inclusive_end`).
int64_t NormalizeAxis(const onnx_light::NodeProto& node, int64_t axis, int64_t rank,
                      const char* what = "axis");

// Reads an integer scalar or 1-element tensor (INT32/INT64).
int64_t ScalarInt(const onnx_light::NodeProto& node, const Tensor& t, const char* what);
// Reads an INT32/INT64 tensor as int64 values.
std::vector<int64_t> IntValues(const onnx_light::NodeProto& node, const Tensor& t,
                               const char* what);

// The intra-op parallel loop (executor/parallel.h; the one implementation).
using core::runtime::ParallelFor;

// The last row of each of `a`'s matrices ([..., 1, K], a dense copy in `holder` from the
// call's allocator), or `a` itself when it has one row per matrix or is a vector: what a
// kernel that ComputesLastRowOnly multiplies when KernelCall::last_row_only() is set.
const Tensor& LastRows(const KernelCall& call, const Tensor& a, Tensor& holder);

}  // namespace onnx_light::ops::math

namespace onnx_light::ops::math {
// For each element of `out_shape` (row-major), the linear index of the element of a tensor
// of shape `in_shape` that broadcasts to it (numpy rules, right-aligned).
std::vector<int64_t> BroadcastIndex(const Shape& out_shape, const Shape& in_shape);
}  // namespace onnx_light::ops::math
