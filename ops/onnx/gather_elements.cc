// GatherElements: out[i] = data[i with i[axis] replaced by indices[i]]; the output has the
// indices' shape (same rank as data, no larger along other axes).
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class GatherElements final : public core::runtime::KernelBase {
 public:
  explicit GatherElements(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& data = call.input(0);
    const auto& indices_t = call.input(1);
    const int64_t rank = data.rank();
    if (rank == 0 || indices_t.rank() != rank)
      call.Fail("data and indices must have the same rank >= 1: " +
                elementwise::DescribeInputs(call));
    const int64_t axis = elementwise::NormalizeAxis(call, axis_, rank);
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis &&
          indices_t.shape()[static_cast<size_t>(d)] > data.shape()[static_cast<size_t>(d)])
        call.Fail("indices are larger than data outside axis " + std::to_string(axis) + ": " +
                  elementwise::DescribeInputs(call));
    const std::vector<int64_t> indices = elementwise::ReadInt64s(call, indices_t, "indices");
    const std::vector<int64_t> strides = core::runtime::DenseStrides(data.shape());
    const int64_t dim = data.shape()[static_cast<size_t>(axis)];
    const core::runtime::Shape& shape = indices_t.shape();
    elementwise::DispatchByWidth(call, data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = data.data<T>();
      auto& out = call.AllocateOutput(0, data.dtype(), shape);
      T* dst = out.template mutable_data<T>();
      std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
      for (int64_t i = 0; i < out.numel(); ++i) {
        int64_t k = indices[static_cast<size_t>(i)];
        if (k < -dim || k >= dim)
          call.Fail("index " + std::to_string(k) + " is out of range for axis " +
                    std::to_string(axis) + " of size " + std::to_string(dim));
        if (k < 0) k += dim;
        int64_t off = 0;
        for (size_t d = 0; d < idx.size(); ++d)
          off += (static_cast<int64_t>(d) == axis ? k : idx[d]) * strides[d];
        dst[i] = src[off];
        for (size_t d = idx.size(); d-- > 0;) {
          if (++idx[d] < shape[d]) break;
          idx[d] = 0;
        }
      }
    });
  }

 private:
  int64_t axis_ = 0;
};

OL_KERNEL_FACTORY(GatherElements)

}  // namespace onnx_light::ops
