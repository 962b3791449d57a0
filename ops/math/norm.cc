#include "ops/math/norm.h"

#include <algorithm>
#include <type_traits>

#include "executor/attributes.h"
#include "onnx_light.pb.h"

namespace onnx_light::ops::math {

using core::runtime::ShapeToString;

NormLayout MakeNormLayout(const NodeProto& node, const Shape& x_shape, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  if (rank == 0) ThrowBadInput(node, "input 'X' must have rank >= 1");
  NormLayout l;
  l.axis = NormalizeAxis(node, axis, rank);
  for (int64_t i = 0; i < rank; ++i) {
    if (i < l.axis) {
      l.rows *= x_shape[i];
      l.stat_shape.push_back(x_shape[i]);
    } else {
      l.d *= x_shape[i];
      l.norm_shape.push_back(x_shape[i]);
      l.stat_shape.push_back(1);
    }
  }
  return l;
}

template <typename T>
ParamView<T>::ParamView(const NodeProto& node, const Tensor& p, const NormLayout& layout,
                        const char* what) {
  Shape ps = p.shape();
  // Leading 1s beyond the normalised rank broadcast trivially.
  while (ps.size() > layout.norm_shape.size() && ps.front() == 1) ps.erase(ps.begin());
  bool ok = ps.size() <= layout.norm_shape.size();
  for (size_t i = 0; ok && i < ps.size(); ++i) {
    const int64_t want = layout.norm_shape[layout.norm_shape.size() - ps.size() + i];
    ok = ps[i] == 1 || ps[i] == want;
  }
  if (!ok)
    core::Throw(core::ErrorCode::kInvalidArgument,
                core::runtime::NodeLabel(node) + ": input '" + what + "' of shape " +
                    ShapeToString(p.shape()) + " does not broadcast to the normalised shape " +
                    ShapeToString(layout.norm_shape));
  const bool is_double = p.dtype() == DataType::kDouble;
  if (!IsFloatType(p.dtype()) && !is_double)
    ThrowUnsupportedType(node, std::string("input '") + what + "'", p.dtype());
  if (std::is_same_v<T, double> != is_double)
    core::Throw(core::ErrorCode::kNotImplemented,
                core::runtime::NodeLabel(node) + ": input '" + what + "' of type " +
                    core::DataTypeName(p.dtype()) + " with an input 'X' of another precision " +
                    "is not supported");
  if (p.numel() == layout.d && p.dtype() == DataType::kFloat) {
    if constexpr (std::is_same_v<T, float>) {
      ptr_ = p.data<float>();
      return;
    }
  }
  std::vector<T> values(static_cast<size_t>(p.numel()));
  if constexpr (std::is_same_v<T, double>) {
    std::copy_n(p.data<double>(), p.numel(), values.begin());
  } else {
    ToFloat(p.dtype(), p.raw_data(), values.data(), p.numel());
  }
  if (p.numel() == layout.d) {
    buffer_ = std::move(values);
  } else {
    const std::vector<int64_t> index = BroadcastIndex(layout.norm_shape, ps);
    buffer_.resize(index.size());
    for (size_t i = 0; i < index.size(); ++i) buffer_[i] = values[static_cast<size_t>(index[i])];
  }
  ptr_ = buffer_.data();
}

template class ParamView<float>;
template class ParamView<double>;

void CheckStashType(const NodeProto& node) {
  const int64_t stash = core::runtime::AttrInt(node, "stash_type", 1);
  if (stash != 1)
    core::Throw(core::ErrorCode::kNotImplemented, core::runtime::NodeLabel(node) + ": stash_type " +
                                                      std::to_string(stash) +
                                                      " is not supported (only 1, FLOAT)");
}

}  // namespace onnx_light::ops::math
