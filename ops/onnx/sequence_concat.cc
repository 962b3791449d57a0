// ConcatFromSequence: joins the sequence's tensors along `axis`, or stacks them along a new
// axis when new_axis = 1. Elements must share dtype, rank and every other dimension.
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class ConcatFromSequence final : public core::runtime::KernelBase {
 public:
  explicit ConcatFromSequence(const core::runtime::KernelContext&) {}
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::RequiredAttrInt(node, "axis");
    new_axis_ = core::runtime::AttrInt(node, "new_axis", 0) != 0;
  }
  void Compute(core::runtime::KernelCall& call) const override {
    using namespace sequence;
    const auto& elements = SequenceInput(call, 0).elements();
    if (elements.empty()) call.Fail("cannot concatenate an empty sequence");
    std::vector<const Tensor*> parts;
    for (size_t i = 0; i < elements.size(); ++i) {
      if (!elements[i].is_tensor()) call.Fail("element " + std::to_string(i) + " is not a tensor");
      parts.push_back(&elements[i].tensor());
    }
    const Tensor& first = *parts[0];
    const int64_t rank = first.rank();
    const int64_t out_rank = new_axis_ ? rank + 1 : rank;
    const int64_t axis = axis_ < 0 ? axis_ + out_rank : axis_;
    if (axis < 0 || axis >= out_rank || out_rank == 0)
      call.Fail("axis " + std::to_string(axis_) + " is out of range for rank " +
                std::to_string(out_rank));
    const size_t a = static_cast<size_t>(axis);
    const size_t es = ElementBytes(call, first.dtype());
    Shape out_shape = first.shape();
    if (new_axis_) out_shape.insert(out_shape.begin() + axis, 0);
    out_shape[a] = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Tensor& t = *parts[i];
      bool ok = t.dtype() == first.dtype() && t.rank() == rank;
      for (int64_t d = 0; ok && d < rank; ++d)
        ok = (!new_axis_ && d == axis) ||
             t.shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
      if (!ok)
        call.Fail("element " + std::to_string(i) + " (" + core::DataTypeName(t.dtype()) + " " +
                  core::runtime::ShapeToString(t.shape()) + ") does not match element 0 (" +
                  core::DataTypeName(first.dtype()) + " " +
                  core::runtime::ShapeToString(first.shape()) + ")");
      out_shape[a] += new_axis_ ? 1 : t.shape()[a];
    }
    Tensor& out = call.AllocateOutput(0, first.dtype(), out_shape);
    auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
    const size_t outer = static_cast<size_t>(Product(out_shape, 0, a));
    const size_t out_row = static_cast<size_t>(Product(out_shape, a, out_shape.size())) * es;
    size_t offset = 0;  // bytes into each output row
    for (const Tensor* t : parts) {
      const size_t row = outer == 0 ? 0 : t->nbytes() / outer;
      const auto* src = static_cast<const uint8_t*>(t->raw_data());
      for (size_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * out_row + offset, src + o * row, row);
      offset += row;
    }
  }

 private:
  int64_t axis_ = 0;
  bool new_axis_ = false;
};

OL_KERNEL_FACTORY(ConcatFromSequence)

}  // namespace onnx_light::ops
