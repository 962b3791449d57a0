// And: numpy-broadcast elementwise logical And of two BOOL tensors.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct AndOp : elementwise::NoCheck {
  bool operator()(bool a, bool b) const { return a && b; }
};
}  // namespace

class And final : public elementwise::SameTypeBinary<AndOp, elementwise::kBoolType> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(And)

}  // namespace onnx_light::ops
