// Not: elementwise logical negation of a BOOL tensor.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct NotOp {
  static constexpr bool kBoolOutput = false;
  template <typename C>
  auto operator()(C a) const {
    return !a;
  }
};
}  // namespace

class Not final : public elementwise::UnaryKernel<NotOp, elementwise::kBoolType> {
 public:
  using UnaryKernel::UnaryKernel;
};

OL_KERNEL_FACTORY(Not)

}  // namespace onnx_light::ops
