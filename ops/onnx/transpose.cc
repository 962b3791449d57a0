// Transpose: permutes dimensions (default: reversed) with one strided copy.
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;

class Transpose final : public core::runtime::KernelBase {
 public:
  explicit Transpose(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    perm_ = core::runtime::OptionalAttrInts(node, "perm");
  }

  // One strided copy either way: a strided view (append-capacity cache) is read in place.
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(KernelCall& call) const override {
    const auto& x = call.input(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> perm;
    if (perm_) {
      perm = *perm_;
    } else {
      for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    if (static_cast<int64_t>(perm.size()) != rank)
      call.Fail("perm has " + std::to_string(perm.size()) + " entries for input of shape " +
                core::runtime::ShapeToString(x.shape()));
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (int64_t& p : perm) {
      p = elementwise::NormalizeAxis(call, p, rank, "perm entry");
      if (seen[static_cast<size_t>(p)]) call.Fail("perm repeats axis " + std::to_string(p));
      seen[static_cast<size_t>(p)] = true;
    }
    const std::vector<int64_t> in_strides = x.strides();
    Shape out_shape(static_cast<size_t>(rank));
    std::vector<int64_t> strides(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
      out_shape[d] = x.shape()[static_cast<size_t>(perm[d])];
      strides[d] = in_strides[static_cast<size_t>(perm[d])];
    }
    elementwise::StridedCopyToOutput(call, 0, x, 0, out_shape, strides);
  }

 private:
  std::optional<std::vector<int64_t>> perm_;
};

OL_KERNEL_FACTORY(Transpose)

}  // namespace onnx_light::ops
