#include "ops/elementwise/types.h"

#include "onnx_light.pb.h"

namespace onnx_light::ops::elementwise {

std::vector<int64_t> ReadInt64s(const KernelCall& call, const Tensor& t, const char* what) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kInt64) {
    const int64_t* p = t.data<int64_t>();
    out.assign(p, p + t.numel());
  } else if (t.dtype() == DataType::kInt32) {
    const int32_t* p = t.data<int32_t>();
    out.assign(p, p + t.numel());
  } else {
    core::Throw(core::ErrorCode::kNotImplemented,
                core::runtime::NodeLabel(call.node()) + ": " + what + " of type " +
                    core::DataTypeName(t.dtype()) + " is not supported (INT32 or INT64)");
  }
  return out;
}

int64_t NormalizeAxis(const KernelCall& call, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    call.Fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
              std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::string DescribeInputs(const KernelCall& call) {
  std::string s;
  for (size_t i = 0; i < call.input_count(); ++i) {
    if (!call.has_input(i)) continue;
    const auto& v = call.input_value(i);
    if (!s.empty()) s += " and ";
    s += "'" + call.node().input(static_cast<int>(i)) + "' ";
    s += v.is_tensor() ? core::runtime::ShapeToString(v.tensor().shape()) : "(not a tensor)";
  }
  return s;
}

}  // namespace onnx_light::ops::elementwise
