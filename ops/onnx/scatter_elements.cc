// ScatterElements: output = copy of data, then for each element i of indices,
// output[i with i[axis] = indices[i]] is replaced by (or reduced with) updates[i], in order.
#include "ops/elementwise/scatter.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class ScatterElements final : public core::runtime::KernelBase {
 public:
  explicit ScatterElements(const core::runtime::KernelInfo& info) : opset_(info.node_opset()) {}

  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
    reduction_ = elementwise::ParseScatterReduction(node, opset_);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& data = call.input(0);
    const auto& indices_t = call.input(1);
    const auto& updates = call.input(2);
    const int64_t rank = data.rank();
    if (rank == 0 || indices_t.rank() != rank || updates.shape() != indices_t.shape())
      call.Fail(
          "data, indices and updates must have one rank >= 1 and indices the updates' shape: " +
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
    std::vector<int64_t> offsets(indices.size());
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < indices.size(); ++i) {
      int64_t k = indices[i];
      if (k < -dim || k >= dim)
        call.Fail("index " + std::to_string(k) + " is out of range for axis " +
                  std::to_string(axis) + " of size " + std::to_string(dim));
      if (k < 0) k += dim;
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        off += (static_cast<int64_t>(d) == axis ? k : idx[d]) * strides[d];
      offsets[i] = off;
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < indices_t.shape()[d]) break;
        idx[d] = 0;
      }
    }
    elementwise::ScatterInto(call, data, updates, reduction_,
                             [&](auto* dst, const auto* upd, auto combine) {
                               for (size_t i = 0; i < offsets.size(); ++i)
                                 combine(dst[offsets[i]], upd[i]);
                             });
  }

 private:
  int64_t opset_;
  int64_t axis_ = 0;
  elementwise::ScatterReduction reduction_ = elementwise::ScatterReduction::kNone;
};

OL_KERNEL_FACTORY(ScatterElements)

}  // namespace onnx_light::ops
