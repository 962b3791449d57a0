// Round: elementwise rounding to the nearest integer, halves to even (as numpy.round).
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct RoundOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    return std::nearbyint(a);  // default rounding mode: halves to even
  }
};
}  // namespace

class Round final : public elementwise::UnaryKernel<RoundOp, elementwise::kFloatTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Round)

}  // namespace onnx_light::ops
