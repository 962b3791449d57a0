// Div: numpy-broadcast elementwise a / b. Integer division truncates toward zero (as C++
// and the ONNX reference do); an integer divisor of zero is an error, not a crash.
#include <limits>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct DivOp {
  template <typename T>
  static void Check(const core::runtime::KernelCall& call, const core::runtime::Tensor& b) {
    if constexpr (std::is_integral_v<T>) {
      const T* p = b.data<T>();
      for (int64_t i = 0; i < b.numel(); ++i)
        if (p[i] == 0)
          call.Fail("integer division by zero (divisor '" + call.node().input(1) + "')");
    }
  }
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
      // INT_MIN / -1 overflows (and traps on x86): wrap like the other integer ops.
      if (b == -1) return elementwise::WrapSub(C{0}, a);
    }
    return static_cast<C>(a / b);
  }
};
}  // namespace

class Div final : public elementwise::SameTypeBinary<DivOp, elementwise::kNumericTypes> {
 public:
  using SameTypeBinary::SameTypeBinary;
};

OL_KERNEL_FACTORY(Div)

}  // namespace onnx_light::ops
