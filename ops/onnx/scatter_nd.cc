// ScatterND: output = copy of data, then for each row of the last indices dimension (k
// values) the block data[i0, ..., ik-1, :] is replaced by (or reduced with) the matching
// block of updates, in order.
#include "ops/elementwise/scatter.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class ScatterND final : public core::runtime::KernelBase {
 public:
  explicit ScatterND(const core::runtime::KernelInfo& info) : opset_(info.node_opset()) {}

  void Configure(const NodeProto& node) override {
    reduction_ = elementwise::ParseScatterReduction(node, opset_);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& data = call.input(0);
    const auto& indices_t = call.input(1);
    const auto& updates = call.input(2);
    const int64_t r = data.rank(), q = indices_t.rank();
    if (r < 1 || q < 1)
      call.Fail("data and indices must have rank >= 1: " + elementwise::DescribeInputs(call));
    const int64_t k = indices_t.shape().back();
    if (k < 1 || k > r)
      call.Fail("the last indices dimension (" + std::to_string(k) + ") must be in [1, " +
                std::to_string(r) + "]: " + elementwise::DescribeInputs(call));
    core::runtime::Shape want(indices_t.shape().begin(), indices_t.shape().end() - 1);
    want.insert(want.end(), data.shape().begin() + k, data.shape().end());
    if (updates.shape() != want)
      call.Fail("updates must have shape " + core::runtime::ShapeToString(want) + ": " +
                elementwise::DescribeInputs(call));
    int64_t inner = 1;
    for (int64_t d = k; d < r; ++d) inner *= data.shape()[static_cast<size_t>(d)];
    const std::vector<int64_t> strides = core::runtime::DenseStrides(data.shape());
    const std::vector<int64_t> indices = elementwise::ReadInt64s(call, indices_t, "indices");
    const int64_t tuples = static_cast<int64_t>(indices.size()) / k;
    std::vector<int64_t> offsets(static_cast<size_t>(tuples));
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dim = data.shape()[static_cast<size_t>(j)];
        int64_t i = indices[static_cast<size_t>(t * k + j)];
        if (i < -dim || i >= dim)
          call.Fail("index " + std::to_string(i) + " is out of range for data dimension " +
                    std::to_string(j) + " of size " + std::to_string(dim));
        if (i < 0) i += dim;
        off += i * strides[static_cast<size_t>(j)];
      }
      offsets[static_cast<size_t>(t)] = off;
    }
    elementwise::ScatterInto(
        call, data, updates, reduction_, [&](auto* dst, const auto* upd, auto combine) {
          for (int64_t t = 0; t < tuples; ++t)
            for (int64_t j = 0; j < inner; ++j)
              combine(dst[offsets[static_cast<size_t>(t)] + j], upd[t * inner + j]);
        });
  }

 private:
  int64_t opset_;
  elementwise::ScatterReduction reduction_ = elementwise::ScatterReduction::kNone;
};

OL_KERNEL_FACTORY(ScatterND)

}  // namespace onnx_light::ops
