// Abs: elementwise absolute value for every numeric type.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct AbsOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    if constexpr (std::is_unsigned_v<C>) {
      return a;
    } else if constexpr (std::is_integral_v<C>) {
      return a < 0 ? elementwise::WrapSub(C{0}, a) : a;  // the minimum wraps, as in numpy
    } else {
      return std::fabs(a);
    }
  }
};
}  // namespace

class Abs final : public elementwise::UnaryKernel<AbsOp, elementwise::kNumericTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Abs)

}  // namespace onnx_light::ops
