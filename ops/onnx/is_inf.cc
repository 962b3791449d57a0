// IsInf: BOOL mask of the infinite elements; detect_negative / detect_positive (default 1)
// choose which signs count.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct IsInfOp {
  static constexpr bool kBoolOutput = true;
  bool negative = true;
  bool positive = true;
  template <typename C>
  bool operator()(C a) const {
    return std::isinf(a) && (a > 0 ? positive : negative);
  }
};
}  // namespace

class IsInf final : public elementwise::UnaryKernel<IsInfOp, elementwise::kFloatTypes> {
 public:
  using UnaryKernel::UnaryKernel;

 protected:
  void Configure(const NodeProto& node) override {
    op_.negative = core::runtime::AttrInt(node, "detect_negative", 1) != 0;
    op_.positive = core::runtime::AttrInt(node, "detect_positive", 1) != 0;
  }
};

OL_KERNEL_FACTORY(IsInf)

}  // namespace onnx_light::ops
