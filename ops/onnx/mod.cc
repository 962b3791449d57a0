// Mod: numpy-broadcast elementwise remainder. fmod=0 (default) takes the divisor's sign
// (numpy.mod), fmod=1 the dividend's (C fmod). An integer divisor of zero is an error.
#include <cmath>

#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
template <bool kFmod>
struct ModOp {
  template <typename C>
  C operator()(C a, C b) const {
    C r;
    if constexpr (std::is_integral_v<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return C{0};  // INT_MIN % -1 traps on x86
      }
      r = static_cast<C>(a % b);
    } else {
      r = std::fmod(a, b);
    }
    if constexpr (!kFmod && std::is_signed_v<C>) {
      if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    }
    return r;
  }
};
}  // namespace

class Mod final : public core::runtime::KernelBase {
 public:
  explicit Mod(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    fmod_ = core::runtime::AttrInt(node, "fmod", 0) != 0;
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& a = call.input(0);
    const auto& b = call.input(1);
    elementwise::CheckSameType(call, a, b);
    elementwise::DispatchType<elementwise::kNumericTypes>(call, a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        const T* p = b.data<T>();
        for (int64_t i = 0; i < b.numel(); ++i)
          if (p[i] == 0)
            call.Fail("integer modulo by zero (divisor '" + call.node().input(1) + "')");
      }
      if (fmod_) {
        elementwise::RunBinary<T, T, T>(call, a, b, a.dtype(), ModOp<true>{});
      } else {
        elementwise::RunBinary<T, T, T>(call, a, b, a.dtype(), ModOp<false>{});
      }
    });
  }

 private:
  bool fmod_ = false;
};

OL_KERNEL_FACTORY(Mod)

}  // namespace onnx_light::ops
