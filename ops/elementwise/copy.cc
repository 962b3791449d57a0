#include "ops/elementwise/copy.h"

namespace onnx_light::ops::elementwise {

void MergeStridedDims(Shape& shape, std::vector<int64_t>& strides) {
  Shape dims;
  std::vector<int64_t> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && st.back() == strides[d] * shape[d]) {
      dims.back() *= shape[d];
      st.back() = strides[d];
    } else {
      dims.push_back(shape[d]);
      st.push_back(strides[d]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    st.push_back(1);
  }
  shape = std::move(dims);
  strides = std::move(st);
}

void StridedCopyToOutput(KernelCall& call, size_t index, const Tensor& in, int64_t base,
                         const Shape& out_shape, const std::vector<int64_t>& strides) {
  DispatchByWidth(call, in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Strides are the caller's, so a strided view is read in place.
    const T* src = static_cast<const T*>(in.strided_data());
    Tensor& out = call.AllocateOutput(index, in.dtype(), out_shape);
    StridedCopy(src, base, out_shape, strides, out.mutable_data<T>());
  });
}

}  // namespace onnx_light::ops::elementwise
