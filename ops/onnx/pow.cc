// Pow: numpy-broadcast elementwise base ** exponent, output of the base's type. Integer
// bases with an exponent of the same type use exact repeated squaring (wrapping, like
// numpy); a scalar floating exponent of 2 or 3 is multiplies; other exponent types are read
// as double.
#include <cmath>

#include "ops/elementwise/cast_util.h"
#include "ops/elementwise/loops.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

namespace {
struct IntPowOp {
  template <typename C>
  C operator()(C a, C e) const {
    C result{1};
    C base = a;
    while (e > 0) {
      if (e & 1) result = elementwise::WrapMul(result, base);
      base = elementwise::WrapMul(base, base);
      e = static_cast<C>(e >> 1);
    }
    return result;
  }
};
struct FloatPowOp {
  template <typename C>
  C operator()(C a, C e) const {
    return std::pow(a, e);
  }
};
struct SquareOp {
  template <typename C>
  C operator()(C a, C) const {
    return a * a;
  }
};
struct CubeOp {
  template <typename C>
  C operator()(C a, C) const {
    return a * a * a;
  }
};
struct MixedPowOp {
  template <typename C>
  C operator()(C a, double e) const {
    return elementwise::ConvertValue<C>(std::pow(static_cast<double>(a), e));
  }
};
}  // namespace

class Pow final : public core::runtime::KernelBase {
 public:
  explicit Pow(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    using namespace elementwise;
    const auto& a = call.input(0);
    const auto& b = call.input(1);
    constexpr TypeSet kBase = kFloatTypes | Bit(DataType::kInt32) | Bit(DataType::kInt64);
    DispatchType<kBase>(
        call, a.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (a.dtype() == b.dtype()) {
            if constexpr (std::is_integral_v<T>) {
              const T* e = b.data<T>();
              for (int64_t i = 0; i < b.numel(); ++i)
                if (e[i] < 0) call.Fail("integer base to a negative integer exponent");
              RunBinary<T, T, T>(call, a, b, a.dtype(), IntPowOp{});
            } else if (b.numel() == 1 && Load(b.data<T>()[0]) == 2) {
              // x ** 2 (RMSNorm, variance) as one multiply: the correctly rounded square.
              RunBinary<T, T, T>(call, a, b, a.dtype(), SquareOp{});
            } else if (b.numel() == 1 && Load(b.data<T>()[0]) == 3) {
              // x ** 3 (the tanh GELU of Gemma, Phi, StarCoder2) as two multiplies, as
              // onnxruntime computes it: two roundings from pow, not ~10 ns of std::pow.
              RunBinary<T, T, T>(call, a, b, a.dtype(), CubeOp{});
            } else {
              RunBinary<T, T, T>(call, a, b, a.dtype(), FloatPowOp{});
            }
            return;
          }
          // Exponents are usually one scalar: reading them as double costs nothing.
          const std::vector<double> e = ToDoubles(call, b, "exponent");
          const Tensor exponent = Tensor::FromDouble("exponent", b.shape(), e);
          RunBinary<T, double, T>(call, a, exponent, a.dtype(), MixedPowOp{});
        },
        "base");
  }
};

OL_KERNEL_FACTORY(Pow)

}  // namespace onnx_light::ops
