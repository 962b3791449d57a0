// Floor: elementwise floor of a floating-point tensor.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct FloorOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    return std::floor(a);
  }
};
}  // namespace

class Floor final : public elementwise::UnaryKernel<FloorOp, elementwise::kFloatTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Floor)

}  // namespace onnx_light::ops
