// Reshape: a view of the input with a new shape (same owner and bytes, no copy). A 0 in
// `shape` copies the input's dimension unless allowzero=1; one -1 is inferred.
#include "core/checked_math.h"
#include "ops/elementwise/types.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::ShapeToString;

class Reshape final : public core::runtime::KernelBase {
 public:
  explicit Reshape(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    allow_zero_ = core::runtime::AttrInt(node, "allowzero", 0) != 0;
  }

  // A strided view stays a view when the new shape allows it (else one dense copy).
  bool ReadsStridedInput(size_t index) const override { return index == 0; }

  void Compute(KernelCall& call) const override {
    const auto& x = call.input(0);
    const Shape requested = elementwise::ReadInt64s(call, call.input(1), "shape");
    OL_CHECK(call.input(1).rank() == 1, core::ErrorCode::kInvalidArgument,
             core::runtime::NodeLabel(call.node()) + ": shape must be 1-D, got shape " +
                 ShapeToString(call.input(1).shape()));
    Shape shape = requested;
    int64_t infer = -1;
    int64_t known = 1;
    bool has_zero = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& d = shape[i];
      if (d == 0 && !allow_zero_) {
        if (static_cast<int64_t>(i) >= x.rank())
          call.Fail("shape " + ShapeToString(requested) + " copies dimension " + std::to_string(i) +
                    " but the input has shape " + ShapeToString(x.shape()));
        d = x.shape()[i];
      } else if (d == -1) {
        if (infer >= 0) call.Fail("shape " + ShapeToString(requested) + " has more than one -1");
        infer = static_cast<int64_t>(i);
        continue;
      } else if (d < -1) {
        call.Fail("shape " + ShapeToString(requested) + " has a negative dimension");
      }
      if (d == 0) has_zero = true;
      known = core::CheckedMul(known, d, "Reshape's shape");
    }
    if (infer >= 0) {
      if (allow_zero_ && has_zero)
        call.Fail("shape " + ShapeToString(requested) + " has both -1 and 0 with allowzero=1");
      if (known == 0 || x.numel() % known != 0)
        call.Fail("cannot reshape input of shape " + ShapeToString(x.shape()) + " to " +
                  ShapeToString(requested));
      shape[static_cast<size_t>(infer)] = x.numel() / known;
    } else if (known != x.numel()) {
      call.Fail("cannot reshape input of shape " + ShapeToString(x.shape()) + " (" +
                std::to_string(x.numel()) + " elements) to " + ShapeToString(requested));
    }
    call.SetOutput(0, x.ReshapedOrCopy(std::move(shape), call.allocator()));
  }

 private:
  bool allow_zero_ = false;
};

OL_KERNEL_FACTORY(Reshape)

}  // namespace onnx_light::ops
