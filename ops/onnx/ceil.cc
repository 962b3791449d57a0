// Ceil: elementwise ceiling of a floating-point tensor.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct CeilOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    return std::ceil(a);
  }
};
}  // namespace

class Ceil final : public elementwise::UnaryKernel<CeilOp, elementwise::kFloatTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Ceil)

}  // namespace onnx_light::ops
