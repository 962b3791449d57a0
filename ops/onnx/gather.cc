// Gather: out[outer, idx..., inner] = data[outer, indices[idx...], inner] along `axis`.
// Negative indices count from the end; an index out of range is an error naming it.
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

class Gather final : public core::runtime::KernelBase {
 public:
  explicit Gather(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
  }

  void Compute(KernelCall& call) const override {
    const Tensor& data = call.input(0);
    const Tensor& indices_t = call.input(1);
    const int64_t rank = data.rank();
    if (rank == 0) call.Fail("data must have rank >= 1, got a scalar");
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, rank);
    std::vector<int64_t> indices = elementwise::ReadInt64s(call, indices_t, "indices");
    const int64_t dim = data.shape()[static_cast<size_t>(axis)];
    for (int64_t& i : indices) {
      if (i < -dim || i >= dim)
        call.Fail("index " + std::to_string(i) + " is out of range for axis " +
                  std::to_string(axis) + " of size " + std::to_string(dim) + " (data shape " +
                  core::runtime::ShapeToString(data.shape()) + ")");
      if (i < 0) i += dim;
    }
    Shape out_shape(data.shape().begin(), data.shape().begin() + axis);
    out_shape.insert(out_shape.end(), indices_t.shape().begin(), indices_t.shape().end());
    out_shape.insert(out_shape.end(), data.shape().begin() + axis + 1, data.shape().end());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= data.shape()[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= data.shape()[static_cast<size_t>(d)];
    const int64_t n = static_cast<int64_t>(indices.size());
    elementwise::DispatchByWidth(call, data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = data.data<T>();
      Tensor& out = call.AllocateOutput(0, data.dtype(), out_shape);
      T* dst = out.mutable_data<T>();
      const int64_t grain =
          std::max<int64_t>(1, elementwise::kParallelGrain / std::max<int64_t>(inner, 1));
      elementwise::ParallelFor(outer * n, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = r / n, j = r % n;
          elementwise::CopyElements(src + (o * dim + indices[static_cast<size_t>(j)]) * inner,
                                    inner, dst + r * inner);
        }
      });
    });
  }

 private:
  int64_t axis_ = 0;
};

OL_KERNEL_FACTORY(Gather)

}  // namespace onnx_light::ops
