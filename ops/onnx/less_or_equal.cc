// LessOrEqual: numpy-broadcast elementwise a <= b, a BOOL tensor.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct LessOrEqualOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};
}  // namespace

class LessOrEqual final
    : public elementwise::CompareBinary<LessOrEqualOp, elementwise::kNumericTypes> {
 public:
  using CompareBinary::CompareBinary;
};

OL_KERNEL_FACTORY(LessOrEqual)

}  // namespace onnx_light::ops
