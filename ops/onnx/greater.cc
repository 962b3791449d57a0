// Greater: numpy-broadcast elementwise a > b, a BOOL tensor.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct GreaterOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
}  // namespace

class Greater final : public elementwise::CompareBinary<GreaterOp, elementwise::kNumericTypes> {
 public:
  using CompareBinary::CompareBinary;
};

OL_KERNEL_FACTORY(Greater)

}  // namespace onnx_light::ops
