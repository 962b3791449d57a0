// NonZero: the indices of the non-zero elements as INT64 [rank, count], in row-major order
// (a scalar counts as rank 1, as numpy.nonzero does).
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class NonZero final : public core::runtime::KernelBase {
 public:
  explicit NonZero(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    core::runtime::Shape shape = x.shape();
    if (shape.empty()) shape = {1};
    elementwise::DispatchType<elementwise::kNumericAndBool>(call, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      std::vector<int64_t> hits;
      for (int64_t i = 0; i < x.numel(); ++i)
        if (elementwise::Load(p[i]) != 0) hits.push_back(i);
      const int64_t count = static_cast<int64_t>(hits.size());
      const int64_t rank = static_cast<int64_t>(shape.size());
      int64_t* out = call.AllocateOutput(0, core::DataType::kInt64, {rank, count})
                         .template mutable_data<int64_t>();
      for (int64_t j = 0; j < count; ++j) {
        int64_t rest = hits[static_cast<size_t>(j)];
        for (int64_t d = rank; d-- > 0;) {
          out[d * count + j] = rest % shape[static_cast<size_t>(d)];
          rest /= shape[static_cast<size_t>(d)];
        }
      }
    });
  }
};

OL_KERNEL_FACTORY(NonZero)

}  // namespace onnx_light::ops
