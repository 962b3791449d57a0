#include "ops/elementwise/broadcast.h"

#include <algorithm>
#include <string>

#include "core/checked_math.h"
#include "core/error.h"
#include "executor/attributes.h"
#include "ops/elementwise/types.h"

namespace onnx_light::ops::elementwise {

std::optional<Shape> TryBroadcastShapes(std::span<const Shape> shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    const size_t lead = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      const int64_t v = s[d];
      int64_t& o = out[lead + d];
      if (v == o || v == 1) continue;
      if (o != 1) return std::nullopt;  // a 0 broadcasts only with 1 or 0 (0 != 1)
      o = v;
    }
  }
  core::CheckedNumel(out, "broadcast output");  // throws before any plan or allocation
  return out;
}

Shape BroadcastShapes(const core::runtime::KernelCall& call, std::span<const Shape> shapes,
                      const std::string& what) {
  std::optional<Shape> out = TryBroadcastShapes(shapes);
  if (!out)
    call.Fail("cannot broadcast " +
              (what.empty() ? "the shapes of " + DescribeInputs(call) : what));
  return std::move(*out);
}

BroadcastPlan::BroadcastPlan(std::span<const Shape> shapes, const Shape& out_shape) {
  inputs_ = static_cast<int>(shapes.size());
  OL_CHECK(inputs_ >= 1 && inputs_ <= kMaxBroadcastInputs, core::ErrorCode::kRuntime,
           "BroadcastPlan supports 1 to 3 inputs");
  numel_ = core::runtime::ShapeNumel(out_shape);
  const size_t rank = out_shape.size();
  // Per input and output dim: is the input full (not broadcast) along it?
  auto full = [&](int k, size_t d) {
    const Shape& s = shapes[static_cast<size_t>(k)];
    const size_t lead = rank - s.size();
    return d >= lead && s[d - lead] != 1;
  };
  // Merge runs of dims whose full/broadcast pattern is the same for every input; drop 1s.
  std::vector<int64_t> dims;
  std::vector<uint32_t> patterns;
  for (size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;
    uint32_t pattern = 0;
    for (int k = 0; k < inputs_; ++k)
      if (full(k, d)) pattern |= 1u << k;
    if (!dims.empty() && patterns.back() == pattern) {
      dims.back() *= out_shape[d];
    } else {
      dims.push_back(out_shape[d]);
      patterns.push_back(pattern);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    patterns.push_back((1u << inputs_) - 1);
  }
  dims_ = dims;
  for (int k = 0; k < inputs_; ++k) {
    auto& st = strides_[static_cast<size_t>(k)];
    st.assign(dims.size(), 0);
    int64_t stride = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      if (patterns[d] & (1u << k)) {
        st[d] = stride;
        stride *= dims[d];
      }
    }
    inner_stride_[static_cast<size_t>(k)] = st.back();
  }
}

}  // namespace onnx_light::ops::elementwise
