// Min: numpy-broadcast elementwise minimum of one or more inputs; NaN propagates (as
// numpy.minimum does).
#include <cmath>

#include "ops/elementwise/variadic.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct MinOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(a)) return a;
    }
    return a < b ? a : b;
  }
};
}  // namespace

class Min final : public elementwise::VariadicKernel<MinOp, elementwise::kNumericTypes> {
 public:
  using VariadicKernel::VariadicKernel;
};

OL_KERNEL_FACTORY(Min)

}  // namespace onnx_light::ops
