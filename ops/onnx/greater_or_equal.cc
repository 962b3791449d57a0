// GreaterOrEqual: numpy-broadcast elementwise a >= b, a BOOL tensor.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct GreaterOrEqualOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};
}  // namespace

class GreaterOrEqual final
    : public elementwise::CompareBinary<GreaterOrEqualOp, elementwise::kNumericTypes> {
 public:
  using CompareBinary::CompareBinary;
};

OL_KERNEL_FACTORY(GreaterOrEqual)

}  // namespace onnx_light::ops
