// ReduceSum / ReduceMean / ReduceMax. Axes come from input 1 (ReduceSum since opset 13,
// the others since 18) or from the `axes` attribute (older opsets); an empty axes list
// reduces everything unless noop_with_empty_axes, which returns the input unchanged.
// Reductions of an empty set give 0 (Sum), NaN (Mean of floats) and the lowest value of
// the type (Max: -inf for floats).
#pragma once

#include <optional>
#include <vector>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

enum class ReduceKind { kSum, kMean, kMax };

struct ReduceAttrs {
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  std::optional<std::vector<int64_t>> axes;  // the attribute form
};

ReduceAttrs ParseReduceAttrs(const onnx_light::NodeProto& node);
void ReduceCompute(KernelCall& call, const ReduceAttrs& attrs, ReduceKind kind);

}  // namespace onnx_light::ops::math
