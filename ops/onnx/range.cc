// Range: [start, start + delta, ...) up to `limit`, max(ceil((limit - start) / delta), 0)
// elements of the inputs' type (FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT16, INT32, INT64).
#include <cmath>

#include "core/checked_math.h"
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Range final : public core::runtime::KernelBase {
 public:
  explicit Range(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    using namespace elementwise;
    const auto& start_t = call.input(0);
    const auto& limit_t = call.input(1);
    const auto& delta_t = call.input(2);
    for (const Tensor* t : {&start_t, &limit_t, &delta_t}) {
      if (t->numel() != 1)
        call.Fail("start, limit and delta must be scalars: " + DescribeInputs(call));
      if (t->dtype() != start_t.dtype())
        call.Fail("start, limit and delta must have one type, got " +
                  core::DataTypeName(start_t.dtype()) + " and " + core::DataTypeName(t->dtype()));
    }
    constexpr TypeSet kAllowed =
        kFloatTypes | Bit(DataType::kInt16) | Bit(DataType::kInt32) | Bit(DataType::kInt64);
    DispatchType<kAllowed>(call, start_t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = elementwise::Compute<T>;  // float for FLOAT16/BFLOAT16
      const C start = Load(start_t.data<T>()[0]);
      const C limit = Load(limit_t.data<T>()[0]);
      const C delta = Load(delta_t.data<T>()[0]);
      if (delta == C{0}) call.Fail("delta must not be zero");
      int64_t n;
      if constexpr (std::is_integral_v<C>) {
        int64_t span = 0;
        if (__builtin_sub_overflow(static_cast<int64_t>(limit), static_cast<int64_t>(start), &span))
          call.Fail("limit - start overflows int64");
        const int64_t d = delta;
        n = span / d + ((span % d != 0 && ((span < 0) == (d < 0))) ? 1 : 0);
      } else {
        const double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                       static_cast<double>(delta));
        if (std::isnan(count)) call.Fail("the number of elements is not a number");
        n = count <= 0 ? 0 : core::CheckedCountFromDouble(count, "Range's element count");
      }
      n = std::max<int64_t>(n, 0);
      T* out = call.AllocateOutput(0, start_t.dtype(), {n}).template mutable_data<T>();
      for (int64_t i = 0; i < n; ++i)
        out[i] = Store<T>(static_cast<C>(start + static_cast<C>(i) * delta));
    });
  }
};

OL_KERNEL_FACTORY(Range)

}  // namespace onnx_light::ops
