// Trilu: keeps the upper (upper=1, j - i >= k) or lower (j - i <= k) triangle of the last
// two dimensions and zeroes the rest; k is the optional INT64 input 1 (default 0). Works
// on the bytes of any fixed-size element type.
#include <cstring>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using math::DataType;
using math::Tensor;

class Trilu final : public core::runtime::KernelBase {
 public:
  explicit Trilu(const core::runtime::KernelContext&) {}

  void Compute(core::runtime::KernelCall& call) const override {
    const Tensor& x = call.input(0);
    if (x.rank() < 2) call.Fail("input must have rank >= 2, got " + std::to_string(x.rank()));
    const int bits = core::ElementBits(x.dtype());
    if (bits < 8 || x.dtype() == DataType::kString)
      math::ThrowUnsupportedType(call.node(), "input", x.dtype());
    const int64_t k =
        call.has_input(1) ? math::ScalarInt(call.node(), call.input(1), "input 'k'") : 0;
    const size_t es = static_cast<size_t>(bits / 8);
    const int64_t rows = x.shape()[x.rank() - 2], cols = x.shape()[x.rank() - 1];
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    Tensor& y = call.AllocateOutput(0, x.dtype(), x.shape());
    const auto* xp = static_cast<const unsigned char*>(x.raw_data());
    auto* yp = static_cast<unsigned char*>(y.mutable_raw_data());
    math::ParallelFor(mats * rows, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r % rows;
        // Kept columns of row i: [max(0, i + k), cols) when upper, [0, min(cols, i + k + 1)).
        int64_t lo = upper_ ? i + k : 0;
        int64_t hi = upper_ ? cols : i + k + 1;
        lo = std::clamp<int64_t>(lo, 0, cols);
        hi = std::clamp<int64_t>(hi, lo, cols);
        const unsigned char* src = xp + static_cast<size_t>(r * cols) * es;
        unsigned char* dst = yp + static_cast<size_t>(r * cols) * es;
        std::memset(dst, 0, static_cast<size_t>(lo) * es);
        std::memcpy(dst + lo * es, src + lo * es, static_cast<size_t>(hi - lo) * es);
        std::memset(dst + hi * es, 0, static_cast<size_t>(cols - hi) * es);
      }
    });
  }

 protected:
  void Configure(const NodeProto& node) override {
    upper_ = core::runtime::AttrInt(node, "upper", 1) != 0;
  }

 private:
  bool upper_ = true;
};

OL_KERNEL_FACTORY(Trilu)

}  // namespace onnx_light::ops
