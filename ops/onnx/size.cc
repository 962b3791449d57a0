// Size: the input's element count as an INT64 scalar.
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Size final : public core::runtime::KernelBase {
 public:
  explicit Size(const core::runtime::KernelContext&) {}
  // Reads only the shape: a strided view needs no dense copy.
  bool ReadsStridedInput(size_t) const override { return true; }
  void Compute(core::runtime::KernelCall& call) const override {
    const int64_t n = call.input(0).numel();
    call.AllocateOutput(0, core::DataType::kInt64, {}).mutable_data<int64_t>()[0] = n;
  }
};

OL_KERNEL_FACTORY(Size)

}  // namespace onnx_light::ops
