// Xor: numpy-broadcast elementwise logical Xor of two BOOL tensors.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct XorOp : elementwise::NoCheck {
  bool operator()(bool a, bool b) const { return a != b; }
};
}  // namespace

class Xor final : public elementwise::SameTypeBinary<XorOp, elementwise::kBoolType> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Xor)

}  // namespace onnx_light::ops
