// Dropout in inference: the output is the input (a view, no copy) and the optional mask is
// all ones (BOOL from opset 10, the input's type before). Training mode with a non-zero
// ratio draws random masks, which this runtime does not do: kNotImplemented.
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

template <int kVersion>
class DropoutKernel final : public core::runtime::KernelBase {
 public:
  explicit DropoutKernel(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    if (kVersion >= 12 && call.has_input(2)) {
      const auto& training = call.input(2);
      const bool train = training.numel() == 1 && training.dtype() == core::DataType::kBool &&
                         training.data<bool>()[0];
      double ratio = 0.5;
      if (call.has_input(1)) {
        const auto& r = call.input(1);
        if (r.dtype() == core::DataType::kFloat)
          ratio = r.data<float>()[0];
        else if (r.dtype() == core::DataType::kDouble)
          ratio = r.data<double>()[0];
        else if (r.dtype() == core::DataType::kFloat16)
          ratio = core::HalfToFloat(r.data<uint16_t>()[0]);
      }
      if (train && ratio != 0.0)
        core::Throw(core::ErrorCode::kNotImplemented,
                    core::runtime::NodeLabel(call.node()) +
                        ": training_mode with a non-zero ratio (random dropout) is not supported");
    }
    call.SetOutput(0, x.BorrowView());
    if (!call.output_wanted(1)) return;
    const core::DataType mask_type = kVersion >= 10 ? core::DataType::kBool : x.dtype();
    elementwise::DispatchType<elementwise::kNumericAndBool>(call, mask_type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto& mask = call.AllocateOutput(1, mask_type, x.shape());
      T* p = mask.template mutable_data<T>();
      std::fill(p, p + mask.numel(), elementwise::Store<T>(elementwise::Compute<T>(1)));
    });
  }
};

using Dropout7 = DropoutKernel<7>;
using Dropout10 = DropoutKernel<10>;
using Dropout12 = DropoutKernel<12>;
OL_KERNEL_FACTORY(Dropout7)
OL_KERNEL_FACTORY(Dropout10)
OL_KERNEL_FACTORY(Dropout12)

}  // namespace onnx_light::ops
