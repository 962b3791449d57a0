// Max: numpy-broadcast elementwise maximum of one or more inputs; NaN propagates (as
// numpy.maximum does).
#include <cmath>

#include "ops/elementwise/variadic.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct MaxOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(a)) return a;
    }
    return a > b ? a : b;
  }
};
}  // namespace

class Max final : public elementwise::VariadicKernel<MaxOp, elementwise::kNumericTypes> {
 public:
  using VariadicKernel::VariadicKernel;
};

OL_KERNEL_FACTORY(Max)

}  // namespace onnx_light::ops
