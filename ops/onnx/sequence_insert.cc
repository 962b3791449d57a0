// SequenceInsert: a new sequence with `tensor` inserted at `position` (default: appended).
// The input sequence is unchanged: only the edited tree path is copied, payloads are shared.
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceInsert final : public core::runtime::KernelBase {
 public:
  explicit SequenceInsert(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const auto& seq = sequence::SequenceInput(call, 0);
    const core::runtime::Tensor& t = call.input(1);
    const core::DataType dtype = sequence::SequenceDtype(seq);
    if (dtype != core::DataType::kUndefined && dtype != t.dtype())
      call.Fail("cannot insert a " + core::DataTypeName(t.dtype()) + " tensor into a sequence of " +
                core::DataTypeName(dtype));
    core::runtime::RuntimeSequence elements = seq.elements();
    const size_t pos = call.has_input(2) ? sequence::NormalizePosition(
                                               call, sequence::ReadIndex(call, 2, "position"),
                                               elements.size(), true)
                                         : elements.size();
    elements.Insert(pos, core::runtime::RuntimeValue(t.BorrowView()));
    call.SetOutputValue(0, core::runtime::RuntimeValue::Sequence(
                               std::move(elements), seq.sequence_elem_type()
                                                        ? seq.sequence_elem_type()
                                                        : sequence::TensorElemType(t.dtype())));
  }
};

OL_KERNEL_FACTORY(SequenceInsert)

}  // namespace onnx_light::ops
