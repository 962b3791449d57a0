#include "ops/fused/row_broadcast.h"

namespace onnx_light::ops::fused {

using core::runtime::Shape;
using core::runtime::ShapeToString;

std::vector<int64_t> RowOffsets(const core::runtime::KernelCall& call, const Shape& x,
                                const Shape& operand, const char* what) {
  const size_t rank = x.size();
  if (rank == 0 || operand.empty() || operand.size() > rank || operand.back() != x.back())
    call.Fail(std::string(what) + " of shape " + ShapeToString(operand) +
              " does not broadcast over rows of " + ShapeToString(x));
  // Operand strides aligned to X's axes (right-aligned); 0 on broadcast axes.
  std::vector<int64_t> stride(rank, 0);
  int64_t s = 1;
  for (size_t i = 0; i < operand.size(); ++i) {
    const size_t axis = rank - 1 - i;
    const int64_t d = operand[operand.size() - 1 - i];
    if (d != 1 && d != x[axis])
      call.Fail(std::string(what) + " of shape " + ShapeToString(operand) +
                " does not broadcast to " + ShapeToString(x));
    stride[axis] = d == 1 ? 0 : s;
    s *= d;
  }
  int64_t rows = 1;
  for (size_t a = 0; a + 1 < rank; ++a) rows *= x[a];
  std::vector<int64_t> offsets(static_cast<size_t>(rows));
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t r = 0; r < rows; ++r) {
    offsets[static_cast<size_t>(r)] = off;
    for (size_t a = rank - 1; a-- > 0;) {  // next row: increment the leading multi-index
      off += stride[a];
      if (++idx[a] < x[a]) break;
      off -= idx[a] * stride[a];
      idx[a] = 0;
    }
  }
  return offsets;
}

}  // namespace onnx_light::ops::fused
