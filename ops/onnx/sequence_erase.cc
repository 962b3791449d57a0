// SequenceErase: a new sequence without the element at `position` (default: the last one).
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceErase final : public core::runtime::KernelBase {
 public:
  explicit SequenceErase(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const auto& seq = sequence::SequenceInput(call, 0);
    core::runtime::RuntimeSequence elements = seq.elements();
    if (elements.empty()) call.Fail("cannot erase from an empty sequence");
    const int64_t position = call.has_input(1) ? sequence::ReadIndex(call, 1, "position") : -1;
    elements.Erase(sequence::NormalizePosition(call, position, elements.size(), false));
    call.SetOutputValue(
        0, core::runtime::RuntimeValue::Sequence(std::move(elements), seq.sequence_elem_type()));
  }
};

OL_KERNEL_FACTORY(SequenceErase)

}  // namespace onnx_light::ops
