// Strided gathers for the data-movement kernels (Transpose, Slice, Expand, Tile): the
// contiguous output at multi-index i reads input element base + sum(i[d] * strides[d]).
// Strides may be 0 (broadcast) or negative (reversed slice). Works on element widths, so one
// instantiation serves every dtype of that width; STRING copies std::string values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/elementwise/parallel.h"
#include "ops/elementwise/types.h"

namespace onnx_light::ops::elementwise {

// Collapses dimensions that are contiguous in both the input (by stride) and the output, and
// drops dimensions of size 1. Returns at least one dimension.
void MergeStridedDims(Shape& shape, std::vector<int64_t>& strides);

template <typename T>
void StridedCopy(const T* in, int64_t base, Shape shape, std::vector<int64_t> strides, T* out) {
  const int64_t total = core::runtime::ShapeNumel(shape);
  if (total == 0) return;
  MergeStridedDims(shape, strides);
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const int64_t inner_stride = strides[rank - 1];
  const int64_t rows = total / inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1));
  ParallelFor(rows, grain, [&](int64_t row_begin, int64_t row_end) {
    std::vector<int64_t> idx(rank, 0);
    int64_t off = base;
    int64_t rest = row_begin;
    for (size_t d = rank - 1; d-- > 0;) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
      off += idx[d] * strides[d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      T* dst = out + row * inner;
      const T* src = in + off;
      if (inner_stride == 1) {
        if constexpr (std::is_trivially_copyable_v<T>) {
          std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
        } else {
          std::copy(src, src + inner, dst);
        }
      } else if (inner_stride == 0) {
        std::fill(dst, dst + inner, *src);
      } else {
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * inner_stride];
      }
      for (size_t d = rank - 1; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < shape[d]) break;
        off -= idx[d] * strides[d];
        idx[d] = 0;
      }
    }
  });
}

// Allocates output `index` with `out_shape` and the input's dtype, and fills it from
// `in` with StridedCopy. FLOAT16, STRING and every fixed-width dtype work; packed sub-byte
// dtypes are kNotImplemented.
void StridedCopyToOutput(KernelCall& call, size_t index, const Tensor& in, int64_t base,
                         const Shape& out_shape, const std::vector<int64_t>& strides);

// Copies `n` elements of width type T (memcpy for trivially copyable types).
template <typename T>
inline void CopyElements(const T* src, int64_t n, T* dst) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else {
    std::copy(src, src + n, dst);
  }
}

}  // namespace onnx_light::ops::elementwise
