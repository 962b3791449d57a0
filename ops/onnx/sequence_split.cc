// SplitToSequence: splits `input` along `axis` into a sequence — into pieces of the given
// lengths (1-D `split`), of one length (scalar `split`, the last piece may be shorter), or
// into single slices (no `split`; keepdims = 0 then drops the axis). Pieces along axis 0 are
// views on the input's bytes; other axes copy.
#include "core/checked_math.h"
#include "ops/kernel_factory.h"
#include "ops/onnx/sequence_util.h"

namespace onnx_light::ops {

class SplitToSequence final : public core::runtime::KernelBase {
 public:
  explicit SplitToSequence(const core::runtime::KernelContext&) {}
  void Configure(const NodeProto& node) override {
    axis_ = core::runtime::AttrInt(node, "axis", 0);
    keepdims_ = core::runtime::AttrInt(node, "keepdims", 1) != 0;
  }
  void Compute(core::runtime::KernelCall& call) const override {
    using namespace sequence;
    const Tensor& x = call.input(0);
    const int64_t rank = x.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank)
      call.Fail("axis " + std::to_string(axis_) + " is out of range for shape " +
                core::runtime::ShapeToString(x.shape()));
    const size_t a = static_cast<size_t>(axis);
    const int64_t dim = x.shape()[a];
    std::vector<int64_t> lengths;
    bool squeeze = false;
    if (!call.has_input(1)) {
      lengths.assign(static_cast<size_t>(dim), 1);
      squeeze = !keepdims_;
    } else {
      const Tensor& split = call.input(1);
      if (split.dtype() != DataType::kInt64 && split.dtype() != DataType::kInt32)
        call.Fail("split must be INT32 or INT64, got " + core::DataTypeName(split.dtype()));
      std::vector<int64_t> values = split.ToInt64Vector();
      if (split.rank() == 0) {
        if (values[0] <= 0) call.Fail("split must be positive, got " + std::to_string(values[0]));
        // Stepping by lengths, not by `done += length`: a huge length would overflow.
        for (int64_t done = 0; done < dim;) {
          const int64_t length = std::min(values[0], dim - done);
          lengths.push_back(length);
          done += length;
        }
      } else {
        int64_t total = 0;
        for (int64_t v : values) {
          if (v < 0) call.Fail("split lengths must be nonnegative, got " + std::to_string(v));
          total = core::CheckedAdd(total, v, "SequenceSplit's lengths");
        }
        if (total != dim)
          call.Fail("split lengths sum to " + std::to_string(total) + ", the axis has " +
                    std::to_string(dim));
        lengths = std::move(values);
      }
    }
    const size_t es = ElementBytes(call, x.dtype());
    const size_t outer = static_cast<size_t>(Product(x.shape(), 0, a));
    const size_t inner = static_cast<size_t>(Product(x.shape(), a + 1, x.shape().size())) * es;
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    RuntimeSequence pieces;
    int64_t start = 0;
    for (int64_t len : lengths) {
      Shape shape = x.shape();
      shape[a] = len;
      const size_t piece = static_cast<size_t>(len) * inner;
      Tensor t;
      if (axis == 0) {  // contiguous: share the input's bytes
        t = Tensor::Borrow(x.name(), x.dtype(), shape, src + static_cast<size_t>(start) * inner,
                           x.owner());
      } else {
        t = Tensor(x.name(), x.dtype(), shape, call.allocator());
        auto* dst = static_cast<uint8_t*>(t.mutable_raw_data());
        const size_t row = static_cast<size_t>(dim) * inner;
        for (size_t o = 0; o < outer; ++o)
          std::memcpy(dst + o * piece, src + o * row + static_cast<size_t>(start) * inner, piece);
      }
      if (squeeze) {
        shape.erase(shape.begin() + axis);
        t = t.Reshaped(shape);
      }
      pieces.PushBack(RuntimeValue(std::move(t)));
      start += len;
    }
    call.SetOutputValue(0, RuntimeValue::Sequence(std::move(pieces), TensorElemType(x.dtype())));
  }

 private:
  int64_t axis_ = 0;
  bool keepdims_ = true;
};

OL_KERNEL_FACTORY(SplitToSequence)

}  // namespace onnx_light::ops
