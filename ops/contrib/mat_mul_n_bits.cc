// com.microsoft MatMulNBits (T1 = FLOAT, FLOAT16 or BFLOAT16 for A, scales, float zero points,
// bias and Y; 16-bit values are widened to float, computed as FLOAT and rounded back, as
// onnxruntime's CPU kernel does for FLOAT16). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (contrib_ops/cpu/quantization/matmul_nbits.cc):
//   Y[..., N] = A[..., K] x W + bias,  W[k, n] = (q[n, k] - zp[n, k / block]) * scale[...]
// Inputs: A; B uint8 [N, ceil(K / block), block * bits / 8] (4 bits: element 2i in the low
// nibble); scales [N * ceil(K / block)]; optional zero_points (uint8 packed the same way per
// column, or FLOAT like scales; absent = 2^(bits - 1)); g_idx (refused); optional bias [N].
// Attributes K, N, bits (4 or 8), block_size (16..256, a power of two), accuracy_level: 4
// means int8 compute in onnxruntime, and here too for 4-bit weights with blocks of a multiple
// of 32 (ops/contrib/nbits_gemm.h, NBitsCompute::kInt8: A quantized to int8 per 32 values):
// one row on the int8 GEMV, several (a batched step, a prompt) on NBitsGemmInt8 where the CPU
// has AVX-512 VNNI; every other case computes in float.
// B is repacked once (ops/contrib/nbits_gemm.h) when B, scales and zero points are plan
// constants, and the copy is kept with the kernel (counted in PackedWeightBytes()); any
// other B is repacked for the call.
#include <memory>

#include "executor/attributes.h"
#include "ops/contrib/nbits_gemm.h"
#include "ops/contrib/nbits_source.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::RuntimeValue;
using core::runtime::Tensor;

class MatMulNBits final : public core::runtime::KernelBase {
 public:
  explicit MatMulNBits(const core::runtime::KernelContext&) { weights_.Reads(1, 4); }
  void Compute(KernelCall& call) const override;
  // An int4 LM head on generate's prompt step multiplies the last row alone.
  bool ComputesLastRowOnly() const override { return true; }
  void OnConstantInput(size_t index, const RuntimeValue& value) override {
    weights_.Declare(index, value);
  }

 protected:
  void Configure(const NodeProto& node) override;

 private:
  contrib::NBitsSource Source(const KernelCall& call, DataType t1, contrib::NBitsWide& wide) const;

  int64_t k_ = 0, n_ = 0, bits_ = 4, block_ = 32;
  contrib::NBitsCompute compute_ = contrib::NBitsCompute::kFloat;
  contrib::ConstantNBitsPack weights_;  // of inputs 1..3 (B, scales, zero_points)
};

void MatMulNBits::Configure(const NodeProto& node) {
  using namespace core::runtime;
  k_ = RequiredAttrInt(node, "K");
  n_ = RequiredAttrInt(node, "N");
  bits_ = AttrInt(node, "bits", 4);
  block_ = RequiredAttrInt(node, "block_size");
  if (AttrInt(node, "accuracy_level", 0) == 4) compute_ = contrib::NBitsCompute::kInt8;
  if (bits_ != 4 && bits_ != 8)
    Throw(core::ErrorCode::kNotImplemented,
          NodeLabel(node) + ": bits " + std::to_string(bits_) + " is not supported (4 or 8)");
  if (block_ < 16 || block_ > 256 || (block_ & (block_ - 1)) != 0)
    Throw(core::ErrorCode::kNotImplemented, NodeLabel(node) + ": block_size " +
                                                std::to_string(block_) +
                                                " is not supported (a power of two in 16..256)");
  if (k_ <= 0 || n_ <= 0)
    Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": K and N must be positive");
}

contrib::NBitsSource MatMulNBits::Source(const KernelCall& call, DataType t1,
                                         contrib::NBitsWide& wide) const {
  if (call.has_input(4))
    Throw(core::ErrorCode::kNotImplemented,
          core::runtime::NodeLabel(call.node()) + ": input 'g_idx' is not supported");
  return contrib::ReadNBitsSource(call, 1, static_cast<int>(bits_), n_, k_, block_, t1, wide);
}

void MatMulNBits::Compute(KernelCall& call) const {
  Tensor a_dense, a_last;
  const Tensor& a_full =
      call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
  const Tensor& a = call.last_row_only() ? math::LastRows(call, a_full, a_last) : a_full;
  contrib::CheckNBitsActivation(call, a, k_);
  const DataType t1 = a.dtype();
  const Tensor* bias = call.has_input(5) ? &call.input(5) : nullptr;
  if (bias && (bias->dtype() != t1 || bias->numel() != n_))
    call.Fail("input 'bias' must be " + core::DataTypeName(t1) +
              " (A's type) with N = " + std::to_string(n_) + " elements");
  if (call.input(2).dtype() != t1)  // checked on every call: the pack below is kept
    call.Fail("input 'scales' must have A's type " + core::DataTypeName(t1) + ", got " +
              core::DataTypeName(call.input(2).dtype()));
  // The source (and 16-bit scales widened to float) is read only to pack.
  auto pack = [&] {
    contrib::NBitsWide wide;
    return std::make_unique<const contrib::PackedNBits>(Source(call, t1, wide));
  };
  std::unique_ptr<const contrib::PackedNBits> local;
  const contrib::PackedNBits* w = weights_.Get(call, pack, local);
  core::runtime::Shape shape = a.shape();
  shape.back() = n_;
  Tensor& y = call.AllocateOutput(0, t1, shape);
  const int64_t m = a.numel() / k_;
  if (m == 0) return;
  const math::FloatView a_float(a);  // FLOAT: in place
  math::FloatSink sink(y);
  float* out = sink.data();
  contrib::NBitsGemm(*w, m, a_float.data(), out, contrib::NBitsPath::kAuto, compute_);
  if (bias) {
    const math::FloatView b(*bias);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n_; ++j) out[r * n_ + j] += b.data()[j];
  }
  sink.Finish();
}

OL_KERNEL_FACTORY(MatMulNBits)

}  // namespace onnx_light::ops
