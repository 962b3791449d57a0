#include "ops/elementwise/scatter.h"

#include "onnx_light.pb.h"

namespace onnx_light::ops::elementwise {

ScatterReduction ParseScatterReduction(const NodeProto& node, int64_t opset) {
  const std::string r = core::runtime::AttrString(node, "reduction", "none");
  if (r == "none") return ScatterReduction::kNone;
  if (opset >= 16 && r == "add") return ScatterReduction::kAdd;
  if (opset >= 16 && r == "mul") return ScatterReduction::kMul;
  if (opset >= 18 && r == "max") return ScatterReduction::kMax;
  if (opset >= 18 && r == "min") return ScatterReduction::kMin;
  core::Throw(core::ErrorCode::kInvalidModel, core::runtime::NodeLabel(node) + ": reduction '" + r +
                                                  "' is not valid at opset " +
                                                  std::to_string(opset));
}

}  // namespace onnx_light::ops::elementwise
