// OneHot: inserts a dimension of size `depth` at `axis`; position indices[i] (negative
// counts from depth) holds values[1], every other position values[0]. Out-of-range indices
// give a row of values[0].
#include <cmath>

#include "core/checked_math.h"
#include "ops/elementwise/cast_util.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class OneHot final : public core::runtime::KernelBase {
 public:
  explicit OneHot(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", -1);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& indices_t = call.input(0);
    const auto& depth_t = call.input(1);
    const auto& values = call.input(2);
    if (depth_t.numel() != 1 || values.numel() != 2)
      call.Fail("depth must have one element and values two: " + elementwise::DescribeInputs(call));
    const double depth_d = elementwise::ToDoubles(call, depth_t, "depth")[0];
    if (!(depth_d >= 1)) call.Fail("depth must be positive, got " + std::to_string(depth_d));
    const int64_t depth = core::CheckedCountFromDouble(std::floor(depth_d), "OneHot's depth");
    const std::vector<double> idx = elementwise::ToDoubles(call, indices_t, "indices");
    const int64_t out_rank = indices_t.rank() + 1;
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, out_rank);
    core::runtime::Shape out_shape = indices_t.shape();
    out_shape.insert(out_shape.begin() + axis, depth);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= indices_t.shape()[static_cast<size_t>(d)];
    for (int64_t d = axis; d < indices_t.rank(); ++d)
      inner *= indices_t.shape()[static_cast<size_t>(d)];
    elementwise::DispatchByWidth(
        call, values.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T off = values.data<T>()[0], on = values.data<T>()[1];
          auto& out = call.AllocateOutput(0, values.dtype(), out_shape);
          T* p = out.template mutable_data<T>();
          std::fill(p, p + out.numel(), off);
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              int64_t k = static_cast<int64_t>(idx[static_cast<size_t>(o * inner + i)]);
              if (k < 0) k += depth;
              if (k >= 0 && k < depth) p[(o * depth + k) * inner + i] = on;
            }
        },
        "values");
  }

 private:
  int64_t axis_ = -1;
};

OL_KERNEL_FACTORY(OneHot)

}  // namespace onnx_light::ops
