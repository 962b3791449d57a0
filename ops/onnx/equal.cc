// Equal: numpy-broadcast elementwise a == b as BOOL, for numeric, BOOL and STRING inputs.
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct EqualOp {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a == b;
  }
};
}  // namespace

class Equal final : public core::runtime::KernelBase {
 public:
  explicit Equal(const core::runtime::KernelContext&) {}
  void Compute(core::runtime::KernelCall& call) const override {
    const auto& a = call.input(0);
    const auto& b = call.input(1);
    elementwise::CheckSameType(call, a, b);
    if (a.dtype() == core::DataType::kString) {
      elementwise::RunBinary<std::string, std::string, bool>(call, a, b, core::DataType::kBool,
                                                             EqualOp{});
      return;
    }
    elementwise::DispatchType<elementwise::kNumericAndBool>(call, a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      elementwise::RunBinary<T, T, bool>(call, a, b, core::DataType::kBool, EqualOp{});
    });
  }
};

OL_KERNEL_FACTORY(Equal)

}  // namespace onnx_light::ops
