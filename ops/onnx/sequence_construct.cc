// SequenceConstruct: a sequence of the input tensors (shared owners, no payload copy).
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceConstruct final : public core::runtime::KernelBase {
 public:
  explicit SequenceConstruct(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    core::runtime::RuntimeSequence elements;
    const core::runtime::Tensor& first = call.input(0);
    for (size_t i = 0; i < call.input_count(); ++i) {
      const core::runtime::Tensor& t = call.input(i);
      if (t.dtype() != first.dtype())
        call.Fail("inputs must share one dtype, got " + core::DataTypeName(first.dtype()) +
                  " and " + core::DataTypeName(t.dtype()));
      elements.PushBack(core::runtime::RuntimeValue(t.BorrowView()));
    }
    call.SetOutputValue(0, core::runtime::RuntimeValue::Sequence(
                               std::move(elements), sequence::TensorElemType(first.dtype())));
  }
};

OL_KERNEL_FACTORY(SequenceConstruct)

}  // namespace onnx_light::ops
