// Shape: the input's dimensions as a 1-D INT64 tensor, sliced by start/end (opset 15;
// out-of-range values are clamped as the spec says).
#include <algorithm>

#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class Shape final : public core::runtime::KernelBase {
 public:
  explicit Shape(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    start_ = core::runtime::AttrInt(node, "start", 0);
    end_ = core::runtime::FindAttribute(node, "end")
               ? std::optional<int64_t>(core::runtime::AttrInt(node, "end", 0))
               : std::nullopt;
  }

  // Reads only the shape: a strided view needs no dense copy.
  bool ReadsStridedInput(size_t) const override { return true; }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& x = call.input(0);
    const int64_t rank = x.rank();
    auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    const int64_t start = clamp(start_);
    const int64_t end = end_ ? clamp(*end_) : rank;
    const int64_t n = std::max<int64_t>(0, end - start);
    auto& out = call.AllocateOutput(0, core::DataType::kInt64, {n});
    int64_t* dst = out.mutable_data<int64_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = x.shape()[static_cast<size_t>(start + i)];
  }

 private:
  int64_t start_ = 0;
  std::optional<int64_t> end_;
};

OL_KERNEL_FACTORY(Shape)

}  // namespace onnx_light::ops
