// Or: numpy-broadcast elementwise logical Or of two BOOL tensors.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct OrOp : elementwise::NoCheck {
  bool operator()(bool a, bool b) const { return a || b; }
};
}  // namespace

class Or final : public elementwise::SameTypeBinary<OrOp, elementwise::kBoolType> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Or)

}  // namespace onnx_light::ops
