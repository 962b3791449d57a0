// EyeLike: a 2-D tensor shaped like the input with ones on diagonal k, of type `dtype`
// (default: the input's type).
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class EyeLike final : public core::runtime::KernelBase {
 public:
  explicit EyeLike(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    k_ = core::runtime::AttrInt(node, "k", 0);
    dtype_ = core::runtime::AttrInt(node, "dtype", 0);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    if (x.rank() != 2)
      call.Fail("input must be 2-D, got shape " + core::runtime::ShapeToString(x.shape()));
    const core::DataType dtype = dtype_ ? static_cast<core::DataType>(dtype_) : x.dtype();
    elementwise::DispatchType<elementwise::kNumericAndBool>(
        call, dtype,
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          auto& out = call.AllocateOutput(0, dtype, x.shape());
          T* p = out.template mutable_data<T>();
          const int64_t rows = x.shape()[0], cols = x.shape()[1];
          std::fill(p, p + out.numel(), elementwise::Store<T>(elementwise::Compute<T>(0)));
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t c = r + k_;
            if (c >= 0 && c < cols)
              p[r * cols + c] = elementwise::Store<T>(elementwise::Compute<T>(1));
          }
        },
        "dtype");
  }

 private:
  int64_t k_ = 0;
  int64_t dtype_ = 0;
};

OL_KERNEL_FACTORY(EyeLike)

}  // namespace onnx_light::ops
