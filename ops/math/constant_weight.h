// The B operand of a MatMul/Gemm node that the plan declared constant, and its packed
// panels, built on the second call that needs them (M > 1) and reused by every later call.
// Not on the first: a plan that multiplies its weights by several rows once (a prompt, then
// decode steps of one row, which stream B unpacked) gains nothing from a copy; the per-call
// path packs B into small per-thread buffers that stay in cache, cheaper than a new copy.
//
// Why a cached pack is never used for other bytes: the plan declares an input constant only
// for an initializer that is not a graph input (KernelBase::OnConstantInput), whose bytes do
// not change while the plan lives, and this object holds a handle on that tensor, so its
// storage stays allocated and no other tensor can occupy its address meanwhile. A call's B
// is served from the pack only when it is that storage (same data pointer, dtype and shape,
// dense); any other B (another buffer, a reshaped or strided view, a graph input) takes the
// per-call packing.
// There is no process-wide table: the pack lives and dies with its kernel, so with the plan.
// (A table shared across plans keyed on owner and address would be unsound: a model proto
// stays mutable from Python while alive, so equal addresses need not mean equal bytes.)
//
// Memory: one float copy of the weight (4 * K * round_up(N, 16) bytes, twice the bytes of a
// FLOAT16/BFLOAT16 weight) from the default allocator, only for weights used with M > 1 at
// least twice, and only when the padding adds at most a quarter (always for N >= 52);
// decode-only (M = 1) use never allocates it. All kept copies of the process together stay
// within a budget (PackedWeightBudget(), 1 GiB by default): past it, weights are packed per
// call, which costs little for weights too large for the caches anyway (then reading B from
// memory, not packing it, bounds the product). Thread safety: Compute is const and
// may run concurrently; calls are counted atomically, the pack is built under
// std::call_once and immutable afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "ops/math/gemm.h"

namespace onnx_light::ops::math {

// Bytes all kept packs may take together, and how many they take now.
size_t PackedWeightBudget();
void SetPackedWeightBudget(size_t bytes);  // affects packs kept from now on
size_t PackedWeightBytes();

class ConstantWeight {
 public:
  ConstantWeight() = default;
  ~ConstantWeight();
  ConstantWeight(const ConstantWeight&) = delete;
  ConstantWeight& operator=(const ConstantWeight&) = delete;

  // From KernelBase::OnConstantInput (before any Compute); ignores non-tensor values.
  void Declare(const core::runtime::RuntimeValue& value);
  bool declared() const { return constant_.defined(); }

  // The pack of op(B) when `b` is the declared constant's storage and a pack is worth
  // keeping (see above), built now if this is the second such call; null otherwise.
  // `values` are b's elements as float (FloatView), K/N/ldb as Sgemm takes them.
  const PackedB* Get(const core::runtime::Tensor& b, const float* values, bool trans_b,
                     int64_t k, int64_t n, int64_t ldb) const;

 private:
  core::runtime::Tensor constant_;
  mutable std::atomic<int> calls_{0};  // eligible calls so far (saturates at 2)
  mutable std::once_flag once_;
  mutable std::unique_ptr<const PackedB> packed_;
};

}  // namespace onnx_light::ops::math
