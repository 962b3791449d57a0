// Add: numpy-broadcast elementwise a + b for every numeric type (integers wrap).
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct AddOp : elementwise::NoCheck {
  template <typename C>
  C operator()(C a, C b) const {
    return elementwise::WrapAdd(a, b);
  }
};
}  // namespace

class Add final : public elementwise::SameTypeBinary<AddOp, elementwise::kNumericTypes> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Add)

}  // namespace onnx_light::ops
