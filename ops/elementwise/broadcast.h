// Multidirectional (numpy) broadcasting: the output shape of N inputs and a plan that walks
// the output in contiguous segments along which each input advances by 0 or 1 element.
// Dimensions are merged first, so same-shape inputs are one segment and a scalar operand
// has stride 0: the element loops see the fast cases without special code.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "executor/kernel.h"

namespace onnx_light::ops::elementwise {

using core::runtime::Shape;

// Multidirectional (numpy) broadcasting, the one implementation: the broadcast shape, or
// nothing when the shapes are incompatible. Throws when the result's element count overflows.
std::optional<Shape> TryBroadcastShapes(std::span<const Shape> shapes);

// The broadcast shape, or a kInvalidArgument naming the node and every input's shape (or
// "cannot broadcast <what>" when `what` is given).
Shape BroadcastShapes(const core::runtime::KernelCall& call, std::span<const Shape> shapes,
                      const std::string& what = "");

inline constexpr int kMaxBroadcastInputs = 3;

class BroadcastPlan {
 public:
  // `shapes` must broadcast to `out_shape` (checked by BroadcastShapes).
  BroadcastPlan(std::span<const Shape> shapes, const Shape& out_shape);

  int64_t numel() const { return numel_; }
  int inputs() const { return inputs_; }
  // Stride (0 or 1) of input k along the innermost merged dimension.
  int64_t inner_stride(int k) const { return inner_stride_[static_cast<size_t>(k)]; }

  // Calls f(out_offset, in_offsets (array of inputs()), length) for each contiguous segment
  // of output elements [begin, end).
  template <typename F>
  void ForEachSegment(int64_t begin, int64_t end, F&& f) const;

 private:
  int inputs_ = 0;
  int64_t numel_ = 0;
  std::vector<int64_t> dims_;  // merged output dims (at least one)
  // strides_[k][d]: element stride of input k along merged dim d (0 when broadcast).
  std::array<std::vector<int64_t>, kMaxBroadcastInputs> strides_;
  std::array<int64_t, kMaxBroadcastInputs> inner_stride_{};
};

template <typename F>
void BroadcastPlan::ForEachSegment(int64_t begin, int64_t end, F&& f) const {
  if (begin >= end) return;
  const size_t rank = dims_.size();
  const int64_t inner = dims_[rank - 1];
  // Multi-index of `begin` and the input offsets there.
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, kMaxBroadcastInputs> off{};
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % dims_[d];
    rest /= dims_[d];
    for (int k = 0; k < inputs_; ++k) off[static_cast<size_t>(k)] += idx[d] * strides_[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t len = std::min(inner - idx[rank - 1], end - pos);
    f(pos, off.data(), len);
    pos += len;
    if (pos >= end) break;
    // Advance to the start of the next row: undo the inner part, carry upwards.
    for (int k = 0; k < inputs_; ++k)
      off[static_cast<size_t>(k)] -= idx[rank - 1] * strides_[k][rank - 1];
    idx[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      ++idx[d];
      for (int k = 0; k < inputs_; ++k) off[static_cast<size_t>(k)] += strides_[k][d];
      if (idx[d] < dims_[d]) break;
      for (int k = 0; k < inputs_; ++k) off[static_cast<size_t>(k)] -= idx[d] * strides_[k][d];
      idx[d] = 0;
    }
  }
}

}  // namespace onnx_light::ops::elementwise
