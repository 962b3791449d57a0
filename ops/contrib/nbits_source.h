// MatMulNBits' weight inputs (B, scales, zero_points) read off a call as an NBitsSource, their
// sizes checked: shared by com.microsoft MatMulNBits and ai.onnx_light.fused
// MatMulNBitsGroup (several products of one A side by side).
#pragma once

#include <memory>
#include <string>

#include "ops/contrib/nbits_gemm.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops::contrib {

// Float copies of 16-bit scales / zero points, alive while the source is read.
struct NBitsWide {
  std::unique_ptr<math::FloatView> scales, zero_points;
};

// The source of inputs first (B), first + 1 (scales), first + 2 (zero_points, optional) for
// an [K, N] weight of `bits` in blocks of `block`, scales of type t1; `which` follows the
// input names in errors (" of product 2"). Fails the call naming the input on a bad size/type.
NBitsSource ReadNBitsSource(const core::runtime::KernelCall& call, size_t first, int bits,
                            int64_t n, int64_t k, int64_t block, core::DataType t1, NBitsWide& wide,
                            const std::string& which = "");

// After a kept pack of the weight: the pages of inputs first .. first + 2 that lie in a
// mapped external-data file go back to the page cache (core::runtime::ReleaseMappedPages),
// so the process does not hold both the file's 4-bit weights and the pack.
void ReleaseNBitsSource(const core::runtime::KernelCall& call, size_t first);

}  // namespace onnx_light::ops::contrib
