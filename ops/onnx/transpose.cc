// Transpose: permutes dimensions (default: reversed) with one strided copy, or none when
// only axes of size 1 move (the bytes are already in the output's order: a view).
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
    Shape out_shape(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d)
      out_shape[d] = x.shape()[static_cast<size_t>(perm[d])];
    if (x.contiguous() && KeepsOrder(x.shape(), perm)) {
      call.SetOutput(0, x.Reshaped(std::move(out_shape)));
      return;
    }
    const std::vector<int64_t> in_strides = x.strides();
    std::vector<int64_t> strides(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d)
      strides[d] = in_strides[static_cast<size_t>(perm[d])];
    elementwise::StridedCopyToOutput(call, 0, x, 0, out_shape, strides);
  }

 private:
  // Whether the axes longer than 1 appear in `perm` in their input order (decode's
  // [1, 1, heads, D] -> [1, heads, 1, D]): then the row-major bytes do not change.
  static bool KeepsOrder(const Shape& shape, const std::vector<int64_t>& perm) {
    int64_t last = -1;
    for (int64_t p : perm) {
      if (shape[static_cast<size_t>(p)] == 1) continue;
      if (p < last) return false;
      last = p;
    }
    return true;
  }

  std::optional<std::vector<int64_t>> perm_;
};

OL_KERNEL_FACTORY(Transpose)

}  // namespace onnx_light::ops
