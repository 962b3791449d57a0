// SequenceEmpty: an empty sequence of tensors of `dtype` (FLOAT by default).
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceEmpty final : public core::runtime::KernelBase {
 public:
  explicit SequenceEmpty(const core::runtime::KernelContext&) {}
  void Configure(const NodeProto& node) override {
    elem_type_ = sequence::TensorElemType(static_cast<core::DataType>(
        core::runtime::AttrInt(node, "dtype", static_cast<int64_t>(core::DataType::kFloat))));
  }
  void Compute(core::runtime::KernelCall& call) const override {
    call.SetOutputValue(0, core::runtime::RuntimeValue::Sequence({}, elem_type_));
  }

 private:
  std::shared_ptr<const TypeProto> elem_type_;
};

OL_KERNEL_FACTORY(SequenceEmpty)

}  // namespace onnx_light::ops
