#include "ops/contrib/nbits_source.h"

#include "core/tensor_proto.h"
#include "executor/parallel.h"
#include "ops/math/constant_weight.h"

namespace onnx_light::ops::contrib {

using core::DataType;
using core::runtime::Tensor;

void CheckNBitsActivation(const core::runtime::KernelCall& call, const Tensor& a, int64_t k) {
  const DataType t1 = a.dtype();
  if (t1 != DataType::kFloat && t1 != DataType::kFloat16 && t1 != DataType::kBFloat16)
    math::ThrowUnsupportedType(call.node(), "input 'A' (FLOAT, FLOAT16 or BFLOAT16)", t1);
  if (a.rank() < 1 || a.dim(-1) != k)
    call.Fail("input 'A' " + core::runtime::ShapeToString(a.shape()) +
              " must end in K = " + std::to_string(k));
}

NBitsSource ReadNBitsSource(const core::runtime::KernelCall& call, size_t first, int bits,
                            int64_t n, int64_t k, int64_t block, DataType t1, NBitsWide& wide,
                            const std::string& which) {
  const int64_t k_blocks = (k + block - 1) / block;
  const Tensor& b = call.input(first);
  const Tensor& scales = call.input(first + 1);
  if (b.dtype() != DataType::kUint8 || b.numel() != n * k_blocks * block * bits / 8)
    call.Fail("input 'B'" + which +
              " must be UINT8 [N, ceil(K / block_size), block_size * bits / 8] = [" +
              std::to_string(n) + ", " + std::to_string(k_blocks) + ", " +
              std::to_string(block * bits / 8) + "], got " + core::DataTypeName(b.dtype()) + " " +
              core::runtime::ShapeToString(b.shape()));
  if (scales.numel() != n * k_blocks)
    call.Fail("input 'scales'" + which + " must have N * ceil(K / block_size) = " +
              std::to_string(n * k_blocks) + " elements");
  NBitsSource s;
  s.bits = bits;
  s.n = n;
  s.k = k;
  s.block = block;
  s.b = b.data<uint8_t>();
  wide.scales = std::make_unique<math::FloatView>(scales);
  s.scales = wide.scales->data();
  if (!call.has_input(first + 2)) return s;
  const Tensor& zp = call.input(first + 2);
  if (zp.dtype() == DataType::kUint8) {
    const int64_t per_col = bits == 8 ? k_blocks : (k_blocks + 1) / 2;
    if (zp.numel() != n * per_col)
      call.Fail("input 'zero_points'" + which + " (UINT8) must have " +
                std::to_string(n * per_col) + " elements");
    s.zp_packed = zp.data<uint8_t>();
  } else if (zp.dtype() == t1) {
    if (zp.numel() != n * k_blocks)
      call.Fail("input 'zero_points'" + which + " (" + core::DataTypeName(t1) +
                ") must have scales' element count");
    wide.zero_points = std::make_unique<math::FloatView>(zp);
    s.zp_float = wide.zero_points->data();
  } else {
    math::ThrowUnsupportedType(call.node(), "input 'zero_points'" + which, zp.dtype());
  }
  return s;
}

ConstantNBitsPack::~ConstantNBitsPack() {
  if (packed_) math::UncountPackedWeightBytes(packed_->bytes());
}

void ConstantNBitsPack::Reads(size_t first, size_t end) {
  first_ = first;
  constant_.assign(end > first ? end - first : 0, Tensor());
}

void ConstantNBitsPack::Declare(size_t index, const core::runtime::RuntimeValue& value) {
  if (index >= first_ && index - first_ < constant_.size() && value.is_tensor())
    constant_[index - first_] = value.tensor();
}

bool ConstantNBitsPack::AllConstant(const core::runtime::KernelCall& call) const {
  for (size_t i = 0; i < constant_.size(); ++i) {
    if (!call.has_input(first_ + i)) continue;
    const Tensor& t = call.input(first_ + i);
    const Tensor& c = constant_[i];
    if (!c.defined() || t.raw_data() != c.raw_data() || t.shape() != c.shape() ||
        t.dtype() != c.dtype())
      return false;
  }
  return !constant_.empty();
}

const PackedNBits* ConstantNBitsPack::Get(const core::runtime::KernelCall& call, const PackFn& pack,
                                          std::unique_ptr<const PackedNBits>& local) const {
  if (!AllConstant(call)) {
    local = pack();
    return local.get();
  }
  core::runtime::CallOnceIsolated(once_, [&] {
    packed_ = pack();
    math::CountPackedWeightBytes(packed_->bytes());
    for (const Tensor& t : constant_)
      if (t.defined()) core::runtime::ReleaseMappedPages(t.strided_data(), t.nbytes());
  });
  return packed_.get();
}

}  // namespace onnx_light::ops::contrib
