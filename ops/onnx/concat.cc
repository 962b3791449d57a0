// Concat: joins inputs along `axis` (negative counts from the end). Inputs must share
// dtype, rank and every other dimension; zero-length inputs are allowed.
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

class Concat final : public core::runtime::KernelBase {
 public:
  explicit Concat(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::RequiredAttrInt(node, "axis");
  }

  void Compute(KernelCall& call) const override {
    std::vector<const Tensor*> inputs;
    for (size_t i = 0; i < call.input_count(); ++i)
      if (call.has_input(i)) inputs.push_back(&call.input(i));
    if (inputs.empty()) call.Fail("needs at least one input");
    const Tensor& first = *inputs[0];
    const int64_t rank = first.rank();
    if (rank == 0) call.Fail("cannot concatenate scalars (rank 0)");
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, rank);
    Shape out_shape = first.shape();
    out_shape[static_cast<size_t>(axis)] = 0;
    for (const Tensor* t : inputs) {
      if (t->dtype() != first.dtype())
        call.Fail("inputs must have one type, got " + core::DataTypeName(first.dtype()) + " and " +
                  core::DataTypeName(t->dtype()));
      bool ok = t->rank() == rank;
      for (int64_t d = 0; ok && d < rank; ++d)
        ok = d == axis || t->shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
      if (!ok)
        call.Fail("inputs must match in every dimension but axis " + std::to_string(axis) +
                  ": " + elementwise::DescribeInputs(call));
      out_shape[static_cast<size_t>(axis)] += t->shape()[static_cast<size_t>(axis)];
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out_shape[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= out_shape[static_cast<size_t>(d)];
    const int64_t out_row = out_shape[static_cast<size_t>(axis)] * inner;
    elementwise::DispatchByWidth(call, first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& out = call.AllocateOutput(0, first.dtype(), out_shape);
      T* dst = out.mutable_data<T>();
      const int64_t grain = std::max<int64_t>(1, elementwise::kParallelGrain / std::max<int64_t>(out_row, 1));
      elementwise::ParallelFor(outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          T* row = dst + o * out_row;
          for (const Tensor* t : inputs) {
            const int64_t chunk = t->shape()[static_cast<size_t>(axis)] * inner;
            elementwise::CopyElements(t->data<T>() + o * chunk, chunk, row);
            row += chunk;
          }
        }
      });
    });
  }

 private:
  int64_t axis_ = 0;
};

OL_KERNEL_FACTORY(Concat)

}  // namespace onnx_light::ops
