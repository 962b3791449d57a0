// MatMulNBits' weight inputs (B, scales, zero_points) read off a call as an NBitsSource, their
// sizes checked, and packed once when they are plan constants: shared by com.microsoft
// MatMulNBits and ai.onnx_light.fused MatMulNBitsGroup (several products of one A side by
// side).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/contrib/nbits_gemm.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops::contrib {

// Float copies of 16-bit scales / zero points, alive while the source is read.
struct NBitsWide {
  std::unique_ptr<math::FloatView> scales, zero_points;
};

// A (input 0 of both kernels) must be FLOAT, FLOAT16 or BFLOAT16 ending in K; fails the call
// naming it otherwise.
void CheckNBitsActivation(const core::runtime::KernelCall& call, const core::runtime::Tensor& a,
                          int64_t k);

// The source of inputs first (B), first + 1 (scales), first + 2 (zero_points, optional) for
// an [K, N] weight of `bits` in blocks of `block`, scales of type t1; `which` follows the
// input names in errors (" of product 2"). Fails the call naming the input on a bad size/type.
NBitsSource ReadNBitsSource(const core::runtime::KernelCall& call, size_t first, int bits,
                            int64_t n, int64_t k, int64_t block, core::DataType t1, NBitsWide& wide,
                            const std::string& which = "");

// A kernel's PackedNBits of weight inputs that are plan constants (MatMulNBits' B, scales,
// zero points; MatMulNBitsGroup's of every product). The first call whose declared inputs
// are those constants (same storage, type, shape) packs them once; the pack is kept (counted
// in math::PackedWeightBytes) and the pages of the source that lie in a mapped external-data
// file go back to the page cache (core::runtime::ReleaseMappedPages), so the process does not
// hold both. Any other call packs for itself.
class ConstantNBitsPack {
 public:
  using PackFn = std::function<std::unique_ptr<const PackedNBits>()>;
  ConstantNBitsPack() = default;
  ConstantNBitsPack(const ConstantNBitsPack&) = delete;
  ConstantNBitsPack& operator=(const ConstantNBitsPack&) = delete;
  ~ConstantNBitsPack();

  // The inputs [first, end) the pack reads (from the kernel's Configure): each one a call
  // gives must be a declared constant for the kept pack to serve it.
  void Reads(size_t first, size_t end);
  // From the kernel's OnConstantInput (indices outside the range are ignored).
  void Declare(size_t index, const core::runtime::RuntimeValue& value);
  // The kept pack, or one made by `pack` into `local` for this call alone.
  const PackedNBits* Get(const core::runtime::KernelCall& call, const PackFn& pack,
                         std::unique_ptr<const PackedNBits>& local) const;

 private:
  bool AllConstant(const core::runtime::KernelCall& call) const;

  size_t first_ = 0;
  std::vector<core::runtime::Tensor> constant_;  // inputs first_.. ; undefined: not declared
  mutable std::once_flag once_;
  mutable std::unique_ptr<const PackedNBits> packed_;
};

}  // namespace onnx_light::ops::contrib
