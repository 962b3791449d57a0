// ai.onnx_light.fused::DequantizeMatMul — what the plan substitutes (executor/fusion.cc) for
// MatMul(A, DequantizeLinear(W, scale, zero_point)) with a constant weight quantized in
// blocks along K (standard ONNX weight-only quantization):
//   inputs  A [..., K] (FLOAT), W [K, N] (INT4/UINT4/INT8/UINT8), scale (FLOAT) blocked
//           [ceil(K/block), N], per column [N] or per tensor (one value), optional
//           zero_point (W's type, scale's shape); attribute block_size (for per-column and
//           per-tensor scales, the block the plan chose to repeat them over)
//   output  Y = A * ((W - zero_point) * scale), shape [..., N]
// Why: the plan would otherwise fold the DequantizeLinear into a FLOAT weight 8 (4-bit) or 4
// (8-bit) times the size, and a decode step is bound by reading the weights. W is repacked
// once into the MatMulNBits tiles (ops/contrib/nbits_gemm.h) with the zero points as floats
// (signed types shifted to unsigned: q + 8 or q + 128, the zero point likewise), and every
// product runs on those tiles in float arithmetic (exactly DequantizeLinear then MatMul, up to
// the summation order), unless the session asks for accuracy_level 4: then the activations are
// quantized to int8 as MatMulNBits accuracy_level 4 does (ops/contrib/nbits_gemm.h).
#include <memory>
#include <mutex>
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/nbits_gemm.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/constant_weight.h"
#include "ops/math/quantize.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::RuntimeValue;
using math::DataType;
using math::Tensor;

namespace {

// W, scale and zero point as MatMulNBits takes them: B [N, k_blocks, block * bits / 8]
// (4 bits: two values a byte, the lower row in the low nibble), scales and float zero
// points [N, k_blocks]. The rows past K (a partial last block) hold zeros.
struct NBitsCopy {
  std::vector<uint8_t> b;
  std::vector<float> scales, zero_points;
  contrib::NBitsSource source;
};

// Where the scale (and zero point) of block kb of column col is: blocked [k_blocks, N], per
// column [N] or one per tensor.
int64_t ScaleIndex(const Tensor& scale, int64_t kb, int64_t col, int64_t n) {
  if (scale.rank() == 2) return kb * n + col;
  return scale.numel() == 1 ? 0 : col;
}

NBitsCopy Transcode(const Tensor& w, const Tensor& scale, const Tensor* zp, int64_t block) {
  const DataType t = w.dtype();
  const int bits = t == DataType::kInt4 || t == DataType::kUint4 ? 4 : 8;
  const int32_t shift = t == DataType::kInt4 ? 8 : t == DataType::kInt8 ? 128 : 0;
  const int64_t k = w.dim(0), n = w.dim(1), k_blocks = (k + block - 1) / block;
  const int64_t block_bytes = block * bits / 8;
  NBitsCopy c;
  c.b.assign(static_cast<size_t>(n * k_blocks * block_bytes), 0);
  c.scales.resize(static_cast<size_t>(n * k_blocks));
  c.zero_points.resize(static_cast<size_t>(n * k_blocks));
  const float* s = scale.data<float>();
  for (int64_t col = 0; col < n; ++col)
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const size_t at = static_cast<size_t>(col * k_blocks + kb);
      const int64_t from = ScaleIndex(scale, kb, col, n);
      c.scales[at] = s[from];
      const int32_t z = zp ? math::QuantGet(t, zp->raw_data(), from) : 0;
      c.zero_points[at] = static_cast<float>(z + shift);
      uint8_t* out = c.b.data() + at * static_cast<size_t>(block_bytes);
      for (int64_t r = 0; r < block && kb * block + r < k; ++r) {
        const auto u = static_cast<uint8_t>(
            math::QuantGet(t, w.raw_data(), (kb * block + r) * n + col) + shift);
        if (bits == 8)
          out[r] = u;
        else
          out[r / 2] |= static_cast<uint8_t>(r % 2 == 0 ? u : u << 4);
      }
    }
  c.source.bits = bits;
  c.source.n = n;
  c.source.k = k;
  c.source.block = block;
  c.source.b = c.b.data();
  c.source.scales = c.scales.data();
  c.source.zp_float = c.zero_points.data();
  return c;
}

}  // namespace

class DequantizeMatMul final : public core::runtime::KernelBase {
 public:
  explicit DequantizeMatMul(const core::runtime::KernelContext&) {}

  bool ComputesLastRowOnly() const override { return true; }

  void OnConstantInput(size_t index, const RuntimeValue& value) override {
    if (index >= 1 && index <= 3 && value.is_tensor()) constant_[index] = value.tensor();
  }

  void Compute(KernelCall& call) const override {
    for (size_t i = 1; i <= 3; ++i)
      if (call.has_input(i) && !constant_[i].defined())
        call.Fail("input " + std::to_string(i) + " must be a plan constant");
    core::runtime::CallOnceIsolated(once_, [&] {
      CheckLayout(call);
      const NBitsCopy copy = Transcode(constant_[1], constant_[2],
                                       constant_[3].defined() ? &constant_[3] : nullptr, block_);
      packed_ = std::make_unique<const contrib::PackedNBits>(copy.source);
      math::CountPackedWeightBytes(packed_->bytes());
    });
    Tensor a_dense, a_last;
    const Tensor& a_full =
        call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
    const Tensor& a = call.last_row_only() ? math::LastRows(call, a_full, a_last) : a_full;
    const int64_t k = packed_->k(), n = packed_->n();
    if (a.dtype() != DataType::kFloat)
      math::ThrowUnsupportedType(call.node(), "input 'A' (only FLOAT)", a.dtype());
    if (a.rank() < 1 || a.dim(-1) != k)
      call.Fail("input 'A' " + core::runtime::ShapeToString(a.shape()) +
                " must end in K = " + std::to_string(k));
    core::runtime::Shape shape = a.shape();
    shape.back() = n;
    Tensor& y = call.AllocateOutput(0, DataType::kFloat, shape);
    if (a.numel() == 0) return;
    contrib::NBitsGemm(*packed_, a.numel() / k, a.data<float>(), y.mutable_data<float>(),
                       contrib::NBitsPath::kAuto, compute_);
  }

 private:
  // The plan builds this node only from a DequantizeLinear it checked (PackableDequantize);
  // a hand-written one is checked here, before anything is read.
  void CheckLayout(KernelCall& call) const {
    const Tensor& w = constant_[1];
    const Tensor& scale = constant_[2];
    if (w.rank() != 2 || block_ < 1 || block_ > 256)
      call.Fail("needs W [K, N] and block_size in 1..256");
    const int64_t k_blocks = (w.dim(0) + block_ - 1) / block_, n = w.dim(1);
    const bool fits = scale.rank() == 2 ? scale.dim(0) == k_blocks && scale.dim(1) == n
                                        : scale.numel() == 1 || scale.numel() == n;
    if (!fits || (constant_[3].defined() && constant_[3].shape() != scale.shape()))
      call.Fail("scale " + core::runtime::ShapeToString(scale.shape()) +
                " (and zero_point) must be [ceil(K / block_size), N], [N] or one value");
  }

 protected:
  void Configure(const NodeProto& node) override {
    block_ = core::runtime::AttrInt(node, "block_size", 0);
    // Set by the plan from RuntimeSessionOptions::dequantize_matmul_accuracy_level.
    if (core::runtime::AttrInt(node, "accuracy_level", 0) == 4)
      compute_ = contrib::NBitsCompute::kInt8;
  }

 private:
  int64_t block_ = 0;
  contrib::NBitsCompute compute_ = contrib::NBitsCompute::kFloat;
  Tensor constant_[4];
  mutable std::once_flag once_;
  mutable std::unique_ptr<const contrib::PackedNBits> packed_;
};

OL_KERNEL_FACTORY(DequantizeMatMul)

}  // namespace onnx_light::ops
