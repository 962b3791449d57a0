// SequenceAt: the element at `position` (negative counts from the end), sharing its bytes.
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceAt final : public core::runtime::KernelBase {
 public:
  explicit SequenceAt(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const auto& elements = sequence::SequenceInput(call, 0).elements();
    const size_t pos = sequence::NormalizePosition(call, sequence::ReadIndex(call, 1, "position"),
                                                   elements.size(), false);
    const core::runtime::RuntimeValue& v = elements[pos];
    if (v.is_tensor())
      call.SetOutput(0, v.tensor().BorrowView());
    else
      call.SetOutputValue(0, v.BorrowView());
  }
};

OL_KERNEL_FACTORY(SequenceAt)

}  // namespace onnx_light::ops
