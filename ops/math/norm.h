// Shared pieces of LayerNormalization, RMSNormalization and SimplifiedLayerNormalization:
// the [rows, D] view of X around `axis`, and Scale/B expanded to D values.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/math/common.h"

namespace onnx_light::ops::math {

struct NormLayout {
  int64_t axis = 0;  // normalised
  int64_t rows = 1;  // prod(shape[:axis])
  int64_t d = 1;     // prod(shape[axis:])
  Shape norm_shape;  // shape[axis:]
  Shape stat_shape;  // shape[:axis] + [1] * (rank - axis): Mean / InvStdDev
};
NormLayout MakeNormLayout(const onnx_light::NodeProto& node, const Shape& x_shape, int64_t axis);

// A parameter (Scale, B) as D values of T (float for FLOAT/FLOAT16/BFLOAT16, or double),
// broadcast to the normalised shape. A FLOAT parameter of exactly that shape is not copied.
template <typename T>
class ParamView {
 public:
  ParamView(const onnx_light::NodeProto& node, const Tensor& p, const NormLayout& layout,
            const char* what);
  const T* data() const { return ptr_; }

 private:
  std::vector<T> buffer_;
  const T* ptr_ = nullptr;
};

// Reads the stash_type attribute: only 1 (FLOAT) is implemented.
void CheckStashType(const onnx_light::NodeProto& node);

}  // namespace onnx_light::ops::math
