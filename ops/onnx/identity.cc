// Identity: the output shares the input's bytes (a new handle on the same owner; no copy).
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Identity final : public core::runtime::KernelBase {
 public:
  explicit Identity(const core::runtime::KernelContext&) {}
  // Passes a strided view on as the same view.
  bool ReadsStridedInput(size_t) const override { return true; }
  void Compute(core::runtime::KernelCall& call) const override {
    call.SetOutputValue(0, call.input_value(0).BorrowView());
  }
};

OL_KERNEL_FACTORY(Identity)

}  // namespace onnx_light::ops
