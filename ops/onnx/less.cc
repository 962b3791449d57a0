// Less: numpy-broadcast elementwise a < b, a BOOL tensor.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct LessOp {
  template <typename C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
}  // namespace

class Less final : public elementwise::CompareBinary<LessOp, elementwise::kNumericTypes> {
 public:
  using CompareBinary::CompareBinary;
};

OL_KERNEL_FACTORY(Less)

}  // namespace onnx_light::ops
