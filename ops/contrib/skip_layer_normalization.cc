// com.microsoft SkipLayerNormalization: inputs input, skip, gamma, optional beta (3) and
// bias (4); outputs output, mean, inv_std_var, input_skip_bias_sum. Semantics and the shared
// body: ops/contrib/skip_norm.h (onnxruntime contrib_ops/cpu/skip_layer_norm.cc).
#include "ops/contrib/skip_norm.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class SkipLayerNormalization final : public contrib::SkipNormBase {
 public:
  explicit SkipLayerNormalization(const core::runtime::KernelContext&)
      : SkipNormBase(/*simplified=*/false, /*beta_input=*/3, /*bias_input=*/4) {}
};

OL_KERNEL_FACTORY(SkipLayerNormalization)

}  // namespace onnx_light::ops
