// Mul: numpy-broadcast elementwise a * b for every numeric type (integers wrap).
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct MulOp : elementwise::NoCheck {
  template <typename C>
  C operator()(C a, C b) const {
    return elementwise::WrapMul(a, b);
  }
};
}  // namespace

class Mul final : public elementwise::SameTypeBinary<MulOp, elementwise::kNumericTypes> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Mul)

}  // namespace onnx_light::ops
