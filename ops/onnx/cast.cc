// Cast: converts to the `to` dtype with numpy's astype semantics (floats truncate toward
// zero into integers, narrow integers wrap, INT4/UINT4/INT2/UINT2 wrap like ml_dtypes).
// `saturate` (opset 19, default 1) clamps out-of-range float8 results.
#include "ops/elementwise/cast_util.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Cast final : public core::runtime::KernelBase {
 public:
  explicit Cast(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    const int64_t to = core::runtime::RequiredAttrInt(node, "to");
    OL_CHECK(core::IsKnownDataType(static_cast<int32_t>(to)), core::ErrorCode::kInvalidModel,
             core::runtime::NodeLabel(node) + ": 'to' is not a data type: " + std::to_string(to));
    to_ = static_cast<core::DataType>(to);
    saturate_ = core::runtime::AttrInt(node, "saturate", 1) != 0;
  }

  void Compute(core::runtime::KernelCall& call) const override {
    elementwise::CastToOutput(call, call.input(0), to_, saturate_);
  }

 private:
  core::DataType to_ = core::DataType::kFloat;
  bool saturate_ = true;
};

OL_KERNEL_FACTORY(Cast)

}  // namespace onnx_light::ops
