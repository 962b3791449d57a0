// Sign: elementwise sign (-1, 0 or 1; NaN stays NaN) for every numeric type.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct SignOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    if (a > C{0}) return C{1};
    if constexpr (std::is_signed_v<C>) {
      if (a < C{0}) return C(-1);
    }
    return a == C{0} ? C{0} : a;  // 0 stays 0, NaN stays NaN
  }
};
}  // namespace

class Sign final : public elementwise::UnaryKernel<SignOp, elementwise::kNumericTypes> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Sign)

}  // namespace onnx_light::ops
