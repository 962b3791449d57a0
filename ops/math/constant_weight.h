// The B operand of a MatMul/Gemm node that the plan declared constant, and its packed
// panels, built on the second call of any shape and reused by every later call: prompts
// (M > 1) run the packed micro-kernel on it, decode steps (M = 1) a GEMV that streams its
// panels sequentially, much faster than reading a row-major [K, N] weight in column blocks.
// Not on the first call: a plan run once gains nothing from a copy (the per-call path packs
// B into small per-thread buffers that stay in cache); except in a plan that runs once per
// step of a loop (PlanBuildScope::repeated_runs, see Declare).
//
// Why a cached pack is never used for other bytes: the plan declares an input constant only
// for an initializer (or a value folded from initializers) that is not a graph input
// (KernelBase::OnConstantInput), whose bytes do not change while the plan lives, and this
// object holds a handle on that tensor, so its storage stays allocated and no other tensor
// can occupy its address meanwhile. A call's B is served from the pack only when it is that
// storage with the same layout (data pointer, strides, dtype and shape); any other B
// (another buffer, a reshaped view, a graph input) takes the per-call path. The declared
// constant may be dense or a FLOAT matrix viewed transposed (a folded Transpose of a tied
// embedding): then the pack holds op(B) = the view, built from the underlying rows.
// There is no process-wide table: the pack lives and dies with its kernel, so with the plan.
// (A table shared across plans keyed on owner and address would be unsound: a model proto
// stays mutable from Python while alive, so equal addresses need not mean equal bytes.)
//
// Memory: one float copy of the weight (4 * K * round_up(N, 16) bytes, twice the bytes of a
// FLOAT16/BFLOAT16 weight) from the default allocator, only for weights used at least twice,
// and only when the padding adds at most a quarter (always for N >= 52). All kept copies of
// the process together stay within a budget (PackedWeightBudget(), by default half of the
// machine's memory, at least 1 GiB): past it, weights run unpacked. Thread safety: Compute
// is const and may run concurrently; calls are counted atomically, the pack is built under
// std::call_once and immutable afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "ops/math/gemm.h"
#include "ops/math/half_gemm.h"

namespace onnx_light::ops::math {

// Bytes all kept packs may take together, and how many they take now.
size_t PackedWeightBudget();
void SetPackedWeightBudget(size_t bytes);  // affects packs kept from now on
size_t PackedWeightBytes();
// Other kernels' packed copies of constant weights (MatMulNBits' repacked blocks) are
// counted in PackedWeightBytes() too. They are always kept, whatever the budget: their
// alternative repacks the whole weight on every call.
void CountPackedWeightBytes(size_t bytes);
void UncountPackedWeightBytes(size_t bytes);

class ConstantWeight {
 public:
  ConstantWeight() = default;
  ~ConstantWeight();
  ConstantWeight(const ConstantWeight&) = delete;
  ConstantWeight& operator=(const ConstantWeight&) = delete;

  // From KernelBase::OnConstantInput (before any Compute); ignores non-tensor values. Declared
  // while a plan with repeated runs is built (PlanBuildScope::repeated_runs: a decoder run
  // once per token), the weight is packed on its first use: packing on the second stalled the
  // first decode step (1.1 s for SmolLM2's 538 MB of FLOAT weights on this project's VMs, and
  // a reported decode rate near half the steady one); on the first it adds to the prompt's.
  void Declare(const core::runtime::RuntimeValue& value);
  bool declared() const { return constant_.defined(); }

  // The pack of op(B) when `b` is the declared constant (same storage, layout, dtype and
  // shape) and a pack is worth keeping (see above), built now if this is the second such
  // call; null otherwise. K/N/ldb as Sgemm takes them; `values` gives b's elements as float
  // in that layout and is called only to build the pack.
  const PackedB* Get(const core::runtime::Tensor& b, bool trans_b, int64_t k, int64_t n,
                     int64_t ldb, const std::function<const float*()>& values) const;
  // The 16-bit panels of `b`, a declared FLOAT16 [K, N] constant, under the same rules
  // (second call, budget, mapped pages released); null otherwise. Viewed transposed (a tied
  // embedding), its alternative is a dense copy on every call: built on the first call and
  // kept even over the budget (counted, as MatMulNBits' packs). A FLOAT16 weight is never
  // packed as FLOAT by MatMul: it streams half the bytes this way.
  const PackedHalfB* GetHalf(const core::runtime::Tensor& b, int64_t k, int64_t n) const;
  // Whether `b` is the declared constant (same storage, layout, dtype and shape).
  bool Serves(const core::runtime::Tensor& b) const;
  // The row stride of a FLOAT or FLOAT16 matrix viewed transposed (strides {1, ld},
  // ld >= rows), whose product reads it as op(B) = B^T over the underlying rows; 0 for any
  // other tensor.
  static int64_t TransposedLd(const core::runtime::Tensor& t);

 private:
  core::runtime::Tensor constant_;
  mutable std::atomic<int> calls_{0};  // eligible calls so far (saturates at 2), see Declare
  mutable std::once_flag once_;
  mutable std::unique_ptr<const PackedB> packed_;
  mutable std::unique_ptr<const PackedHalfB> half_;
};

// Several dense FLOAT [K, N_i] weights that one input multiplies (the Q/K/V or gate/up
// projections of a decoder layer, ai.onnx_light.fused::MatMulGroup), packed as one PackedB
// of [K, sum of padded N_i]: weight i's columns start at offset(i), a multiple of 16, so
// one GEMV or GEMM call streams every weight. The rules of ConstantWeight hold (second use,
// budget, mapped pages released, immutable once built, served only for the declared
// storage).
class ConstantWeightGroup {
 public:
  explicit ConstantWeightGroup(size_t count) : constants_(count) {}
  ~ConstantWeightGroup();
  ConstantWeightGroup(const ConstantWeightGroup&) = delete;
  ConstantWeightGroup& operator=(const ConstantWeightGroup&) = delete;

  // Weight `i` (from KernelBase::OnConstantInput); kept only when dense FLOAT or FLOAT16
  // rank 2. Packed on the first use in a plan with repeated runs, as ConstantWeight.
  void Declare(size_t i, const core::runtime::RuntimeValue& value);
  // The pack when every `b[i]` is weight i as declared, all with K rows, FLOAT, and packing
  // is worth it; built now on the second such call; null otherwise.
  const PackedB* Get(const std::vector<const core::runtime::Tensor*>& b) const;
  // The same for FLOAT16 weights: 16-bit panels of [K, sum of padded N_i].
  const PackedHalfB* GetHalf(const std::vector<const core::runtime::Tensor*>& b) const;
  // Column offset of weight i in the pack, and the pack's width.
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t width() const { return offsets_.empty() ? 0 : offsets_.back(); }

 private:
  bool Serves(const std::vector<const core::runtime::Tensor*>& b) const;
  template <class T, class Pack, class Make>
  std::unique_ptr<const Pack> SideBySide(const Make& make) const;
  void Build() const;      // FLOAT weights
  void BuildHalf() const;  // FLOAT16 weights

  std::vector<core::runtime::Tensor> constants_;
  mutable std::vector<int64_t> offsets_;  // count + 1 entries once built
  mutable std::atomic<int> calls_{0};
  mutable std::once_flag once_;
  mutable std::unique_ptr<const PackedB> packed_;
  mutable std::unique_ptr<const PackedHalfB> half_;
};

}  // namespace onnx_light::ops::math
