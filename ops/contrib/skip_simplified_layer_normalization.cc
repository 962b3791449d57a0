// com.microsoft SkipSimplifiedLayerNormalization (the RMS form the genai builder writes
// between decoder blocks): inputs input, skip, gamma, optional bias (3); outputs output,
// mean (0: the RMS form has no mean), inv_std_var, input_skip_bias_sum. Semantics and the
// shared body: ops/contrib/skip_norm.h (onnxruntime contrib_ops/cpu/skip_layer_norm.cc).
#include "ops/contrib/skip_norm.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class SkipSimplifiedLayerNormalization final : public contrib::SkipNormBase {
 public:
  explicit SkipSimplifiedLayerNormalization(const core::runtime::KernelContext&)
      : SkipNormBase(/*simplified=*/true, /*beta_input=*/-1, /*bias_input=*/3) {}
};

OL_KERNEL_FACTORY(SkipSimplifiedLayerNormalization)

}  // namespace onnx_light::ops
