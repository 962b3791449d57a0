// SequenceLength: the number of elements, as an INT64 scalar.
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SequenceLength final : public core::runtime::KernelBase {
 public:
  explicit SequenceLength(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const size_t n = sequence::SequenceInput(call, 0).elements().size();
    core::runtime::Tensor& out = call.AllocateOutput(0, core::DataType::kInt64, {});
    *out.mutable_data<int64_t>() = static_cast<int64_t>(n);
  }
};

OL_KERNEL_FACTORY(SequenceLength)

}  // namespace onnx_light::ops
