// IsNaN: BOOL mask of the NaN elements of a floating-point tensor.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct IsNaNOp {
  static constexpr bool kBoolOutput = true;
  template <typename C>
  auto operator()(C a) const {
    return std::isnan(a);
  }
};
}  // namespace

class IsNaN final : public elementwise::UnaryKernel<IsNaNOp, elementwise::kFloatTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(IsNaN)

}  // namespace onnx_light::ops
