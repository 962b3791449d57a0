// Sub: numpy-broadcast elementwise a - b for every numeric type (integers wrap).
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct SubOp : elementwise::NoCheck {
  template <typename C>
  C operator()(C a, C b) const {
    return elementwise::WrapSub(a, b);
  }
};
}  // namespace

class Sub final : public elementwise::SameTypeBinary<SubOp, elementwise::kNumericTypes> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Sub)

}  // namespace onnx_light::ops
