// GatherND: each row of the last indices dimension (k values) picks a block
// data[batch..., i0, ..., ik-1, :] after `batch_dims` shared leading dimensions. The output
// has shape indices.shape[:-1] + data.shape[batch_dims + k:].
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

class GatherND final : public core::runtime::KernelBase {
 public:
  explicit GatherND(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    batch_dims_ = core::runtime::AttrInt(node, "batch_dims", 0);
  }

  void Compute(core::runtime::KernelCall& call) const override {
    const auto& data = call.input(0);
    const auto& indices_t = call.input(1);
    const int64_t r = data.rank(), q = indices_t.rank(), b = batch_dims_;
    if (r < 1 || q < 1 || b < 0 || b >= std::min(r, q))
      call.Fail("needs data and indices of rank >= 1 and batch_dims < both ranks: " +
                elementwise::DescribeInputs(call));
    const int64_t k = indices_t.shape().back();
    if (k < 1 || k > r - b)
      call.Fail("the last indices dimension (" + std::to_string(k) + ") must be in [1, " +
                std::to_string(r - b) + "]: " + elementwise::DescribeInputs(call));
    int64_t batch = 1;
    for (int64_t d = 0; d < b; ++d) {
      if (data.shape()[static_cast<size_t>(d)] != indices_t.shape()[static_cast<size_t>(d)])
        call.Fail("batch dimensions of data and indices differ: " +
                  elementwise::DescribeInputs(call));
      batch *= data.shape()[static_cast<size_t>(d)];
    }
    core::runtime::Shape out_shape(indices_t.shape().begin(), indices_t.shape().end() - 1);
    out_shape.insert(out_shape.end(), data.shape().begin() + b + k, data.shape().end());
    int64_t inner = 1;
    for (int64_t d = b + k; d < r; ++d) inner *= data.shape()[static_cast<size_t>(d)];
    const std::vector<int64_t> strides = core::runtime::DenseStrides(data.shape());
    const std::vector<int64_t> indices = elementwise::ReadInt64s(call, indices_t, "indices");
    const int64_t tuples = static_cast<int64_t>(indices.size()) / k;
    const int64_t per_batch = batch > 0 ? tuples / batch : 0;
    const int64_t batch_stride = b > 0 ? strides[static_cast<size_t>(b - 1)] : 0;
    std::vector<int64_t> offsets(static_cast<size_t>(tuples));
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = (per_batch > 0 ? t / per_batch : 0) * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dim = data.shape()[static_cast<size_t>(b + j)];
        int64_t i = indices[static_cast<size_t>(t * k + j)];
        if (i < -dim || i >= dim)
          call.Fail("index " + std::to_string(i) + " is out of range for data dimension " +
                    std::to_string(b + j) + " of size " + std::to_string(dim));
        if (i < 0) i += dim;
        off += i * strides[static_cast<size_t>(b + j)];
      }
      offsets[static_cast<size_t>(t)] = off;
    }
    elementwise::DispatchByWidth(call, data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = data.data<T>();
      auto& out = call.AllocateOutput(0, data.dtype(), out_shape);
      T* dst = out.template mutable_data<T>();
      for (int64_t t = 0; t < tuples; ++t)
        elementwise::CopyElements(src + offsets[static_cast<size_t>(t)], inner, dst + t * inner);
    });
  }

 private:
  int64_t batch_dims_ = 0;
};

OL_KERNEL_FACTORY(GatherND)

}  // namespace onnx_light::ops
