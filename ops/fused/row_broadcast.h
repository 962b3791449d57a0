// Row offsets of an operand broadcast against X over X's leading dimensions, for fused
// kernels that work on rows of X's last dimension: row r of X reads the operand's row at
// the returned element offset (0 strides where the operand has size 1 or fewer dims).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "executor/kernel.h"

namespace onnx_light::ops::fused {

// `operand` must broadcast to X's shape and have X's last dimension; fails naming `what`.
std::vector<int64_t> RowOffsets(const core::runtime::KernelCall& call,
                                const core::runtime::Shape& x, const core::runtime::Shape& operand,
                                const char* what);

}  // namespace onnx_light::ops::fused
