// Pad: modes constant (default), reflect, edge and wrap (opset 19). Pads are
// [begin_0, ..., begin_n, end_0, ..., end_n]; negative pads crop. Opset 2-10 take pads and
// value as attributes; 11+ take pads and constant_value as inputs, 18+ optional axes.
// Each output index maps to an input index per dimension (or to the constant).
#include "core/checked_math.h"
#include "ops/elementwise/cast_util.h"
#include "ops/elementwise/copy.h"
#include "ops/kernel_factory.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

template <bool kInputs>
class PadKernel final : public core::runtime::KernelBase {
 public:
  explicit PadKernel(const core::runtime::KernelContext&) {}

  void Configure(const NodeProto& node) override {
    mode_ = core::runtime::AttrString(node, "mode", "constant");
    if (mode_ != "constant" && mode_ != "reflect" && mode_ != "edge" && mode_ != "wrap")
      core::Throw(core::ErrorCode::kInvalidModel,
                  core::runtime::NodeLabel(node) + ": unknown mode '" + mode_ + "'");
    if (!kInputs) {
      pads_ = core::runtime::AttrInts(node, "pads");
      value_ = core::runtime::AttrFloat(node, "value", 0.f);
    }
  }

  void Compute(KernelCall& call) const override {
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> given = pads_;
    std::vector<int64_t> axes;
    if (kInputs) {
      given = elementwise::ReadInt64s(call, call.input(1), "pads");
      if (call.has_input(3)) axes = elementwise::ReadInt64s(call, call.input(3), "axes");
    }
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    const size_t n = axes.size();
    if (given.size() != 2 * n)
      call.Fail("pads has " + std::to_string(given.size()) + " values, expected " +
                std::to_string(2 * n) + " for input of shape " +
                core::runtime::ShapeToString(x.shape()));
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0), end(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < n; ++i) {
      const size_t a = static_cast<size_t>(elementwise::NormalizeAxis(call, axes[i], rank));
      begin[a] = given[i];
      end[a] = given[i + n];
    }
    Shape out_shape(static_cast<size_t>(rank));
    // maps[d][o]: input index for output index o along d, or -1 for the constant.
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
    for (size_t d = 0; d < static_cast<size_t>(rank); ++d) {
      const int64_t dim = x.shape()[d];
      out_shape[d] = core::CheckedSignedAdd(core::CheckedSignedAdd(dim, begin[d], "Pad's output"),
                                            end[d], "Pad's output");
      if (out_shape[d] < 0)
        call.Fail("pads crop more than axis " + std::to_string(d) + " of input shape " +
                  core::runtime::ShapeToString(x.shape()));
      if (mode_ != "constant" && dim == 0 && out_shape[d] > 0)
        call.Fail("cannot pad the empty axis " + std::to_string(d) + " in " + mode_ + " mode");
    }
    // The index maps hold one entry per output index: size-check the output before them, and
    // build none for an empty output (whose other axes may still be huge).
    if (core::CheckedNumel(out_shape, "Pad's output") == 0) maps.clear();
    for (size_t d = 0; d < maps.size(); ++d) {
      const int64_t dim = x.shape()[d];
      auto& m = maps[d];
      m.resize(static_cast<size_t>(out_shape[d]));
      for (int64_t o = 0; o < out_shape[d]; ++o) {
        int64_t i = o - begin[d];
        if (i < 0 || i >= dim) {
          if (mode_ == "constant") {
            i = -1;
          } else if (mode_ == "edge") {
            i = std::clamp<int64_t>(i, 0, dim - 1);
          } else if (mode_ == "wrap") {
            i = ((i % dim) + dim) % dim;
          } else if (dim == 1) {  // reflect
            i = 0;
          } else {
            const int64_t period = 2 * (dim - 1);
            i = ((i % period) + period) % period;
            if (i >= dim) i = period - i;
          }
        }
        m[static_cast<size_t>(o)] = i;
      }
    }
    if (x.dtype() == core::DataType::kString)
      core::Throw(core::ErrorCode::kNotImplemented,
                  core::runtime::NodeLabel(call.node()) + ": STRING input is not supported");
    elementwise::DispatchType<elementwise::kNumericAndBool>(call, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T fill = elementwise::Store<T>(elementwise::ConvertValue<elementwise::Compute<T>>(value_));
      if (kInputs && call.has_input(2)) {
        const Tensor& v = call.input(2);
        if (v.dtype() != x.dtype() || v.numel() != 1)
          call.Fail("constant_value must be one element of the input's type: " +
                    elementwise::DescribeInputs(call));
        fill = v.data<T>()[0];
      }
      Pad(x.data<T>(), x.shape(), out_shape, maps, fill,
          call.AllocateOutput(0, x.dtype(), out_shape).template mutable_data<T>());
    });
  }

 private:
  template <typename T>
  static void Pad(const T* src, const Shape& in_shape, const Shape& out_shape,
                  const std::vector<std::vector<int64_t>>& maps, T fill, T* dst) {
    const int64_t total = core::runtime::ShapeNumel(out_shape);
    if (total == 0) return;
    const size_t rank = out_shape.size();
    if (rank == 0) {
      dst[0] = src[0];
      return;
    }
    const std::vector<int64_t> strides = core::runtime::DenseStrides(in_shape);
    const int64_t inner = out_shape[rank - 1];
    const auto& last = maps[rank - 1];
    std::vector<int64_t> idx(rank, 0);
    for (int64_t row = 0; row < total / inner; ++row) {
      int64_t off = 0;
      bool constant = false;
      for (size_t d = 0; d + 1 < rank; ++d) {
        const int64_t i = maps[d][static_cast<size_t>(idx[d])];
        if (i < 0) constant = true;
        off += i * strides[d];
      }
      T* out = dst + row * inner;
      if (constant) {
        std::fill(out, out + inner, fill);
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          const int64_t i = last[static_cast<size_t>(j)];
          out[j] = i < 0 ? fill : src[off + i];
        }
      }
      for (size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < out_shape[d]) break;
        idx[d] = 0;
      }
    }
  }

  std::string mode_;
  std::vector<int64_t> pads_;
  float value_ = 0.f;
};

using Pad2 = PadKernel<false>;
using Pad11 = PadKernel<true>;
OL_KERNEL_FACTORY(Pad2)
OL_KERNEL_FACTORY(Pad11)

}  // namespace onnx_light::ops
