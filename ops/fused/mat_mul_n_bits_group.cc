// ai.onnx_light.fused::MatMulNBitsGroup — what the plan substitutes (executor/fusion.cc) for
// several com.microsoft MatMulNBits nodes that multiply one input by different constant
// weights of one K, bits, block size, accuracy level and zero-point kind: the Q/K/V and
// gate/up projections of the Hub's int4 files (onnxruntime's MatMulNBitsQuantizer keeps
// them separate).
//   inputs  A [..., K] (FLOAT, FLOAT16 or BFLOAT16), then per product B_i, scales_i and
//           zero_points_i ("" when absent), as MatMulNBits takes them
//   outputs Y_i = A x W_i, shape [..., N_i]
//   attributes K, bits, block_size, accuracy_level (MatMulNBits'), N (one per product)
// Why: a decode step reads the weights once; each MatMulNBits call also pays a fixed cost
// (the fork/join of its parallel pass, padding A) that a 576 x 192 weight does not hide.
// The weights are packed once as one PackedNBits of the columns side by side (B rows,
// scales and zero points concatenated; W_i's column j is column offset_i + j), one product
// lands in an [M, sum N_i] scratch, and each Y_i takes its columns: every column is computed
// as the separate MatMulNBits computes it, so the outputs are the same bits.
#include <memory>
#include <vector>

#include "executor/attributes.h"
#include "ops/contrib/nbits_gemm.h"
#include "ops/contrib/nbits_source.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Tensor;

class MatMulNBitsGroup final : public core::runtime::KernelBase {
 public:
  explicit MatMulNBitsGroup(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override;
  void OnConstantInput(size_t index, const core::runtime::RuntimeValue& value) override {
    weights_.Declare(index, value);
  }

 protected:
  void Configure(const NodeProto& node) override;

 private:
  // The products' weights side by side as one source (owning the concatenated bytes).
  struct Concatenated {
    std::vector<uint8_t> b, zp_packed;
    std::vector<float> scales, zp_float;
    contrib::NBitsSource source;
  };
  std::unique_ptr<const contrib::PackedNBits> Pack(const KernelCall& call, DataType t1) const;

  int64_t k_ = 0, bits_ = 4, block_ = 32, width_ = 0;
  std::vector<int64_t> n_, offset_;
  contrib::NBitsCompute compute_ = contrib::NBitsCompute::kFloat;
  contrib::ConstantNBitsPack weights_;  // of inputs 1.. (every product's)
};

void MatMulNBitsGroup::Configure(const NodeProto& node) {
  using namespace core::runtime;
  k_ = RequiredAttrInt(node, "K");
  bits_ = RequiredAttrInt(node, "bits");
  block_ = RequiredAttrInt(node, "block_size");
  if (AttrInt(node, "accuracy_level", 0) == 4) compute_ = contrib::NBitsCompute::kInt8;
  n_ = AttrInts(node, "N");
  if ((node.input_size() - 1) % 3 != 0 || n_.size() != static_cast<size_t>(node.input_size() / 3) ||
      n_.size() != static_cast<size_t>(node.output_size()) || n_.size() < 2)
    Throw(core::ErrorCode::kInvalidModel,
          NodeLabel(node) + ": needs A, (B, scales, zero_points) and an N per output");
  for (int64_t n : n_) {
    if (n <= 0) Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": N must be positive");
    offset_.push_back(width_);
    width_ += n;
  }
  weights_.Reads(1, static_cast<size_t>(node.input_size()));
}

std::unique_ptr<const contrib::PackedNBits> MatMulNBitsGroup::Pack(const KernelCall& call,
                                                                   DataType t1) const {
  Concatenated all;
  const bool any_zp = call.has_input(3);
  for (size_t i = 0; i < n_.size(); ++i) {
    const size_t first = 1 + 3 * i;
    if (call.has_input(first + 2) != any_zp) call.Fail("every product needs zero points, or none");
    contrib::NBitsWide wide;
    const contrib::NBitsSource s =
        contrib::ReadNBitsSource(call, first, static_cast<int>(bits_), n_[i], k_, block_, t1, wide,
                                 " of product " + std::to_string(i + 1));
    if (i > 0 && (s.zp_packed != nullptr) != !all.zp_packed.empty())
      call.Fail("every product's zero points must have one type");
    const int64_t k_blocks = (k_ + block_ - 1) / block_;
    const int64_t per_col_zp = bits_ == 8 ? k_blocks : (k_blocks + 1) / 2;
    all.b.insert(all.b.end(), s.b, s.b + n_[i] * k_blocks * block_ * bits_ / 8);
    all.scales.insert(all.scales.end(), s.scales, s.scales + n_[i] * k_blocks);
    if (s.zp_packed)
      all.zp_packed.insert(all.zp_packed.end(), s.zp_packed, s.zp_packed + n_[i] * per_col_zp);
    if (s.zp_float)
      all.zp_float.insert(all.zp_float.end(), s.zp_float, s.zp_float + n_[i] * k_blocks);
  }
  contrib::NBitsSource& s = all.source;
  s.bits = static_cast<int>(bits_);
  s.n = width_;
  s.k = k_;
  s.block = block_;
  s.b = all.b.data();
  s.scales = all.scales.data();
  s.zp_packed = all.zp_packed.empty() ? nullptr : all.zp_packed.data();
  s.zp_float = all.zp_float.empty() ? nullptr : all.zp_float.data();
  return std::make_unique<const contrib::PackedNBits>(s);
}

void MatMulNBitsGroup::Compute(KernelCall& call) const {
  Tensor a_dense;
  const Tensor& a =
      call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
  contrib::CheckNBitsActivation(call, a, k_);
  const DataType t1 = a.dtype();
  for (size_t i = 0; i < n_.size(); ++i)
    if (call.input(2 + 3 * i).dtype() != t1)  // checked on every call: the pack is kept
      call.Fail("input 'scales' of product " + std::to_string(i + 1) + " must have A's type " +
                core::DataTypeName(t1));
  std::unique_ptr<const contrib::PackedNBits> local;
  const contrib::PackedNBits* w = weights_.Get(
      call, [&] { return Pack(call, t1); }, local);
  std::vector<Tensor*> y(n_.size(), nullptr);
  for (size_t i = 0; i < n_.size(); ++i) {
    core::runtime::Shape shape = a.shape();
    shape.back() = n_[i];
    if (call.output_wanted(i)) y[i] = &call.AllocateOutput(i, t1, shape);
  }
  const int64_t m = a.numel() / k_;
  if (m == 0) return;
  const math::FloatView a_float(a);  // FLOAT: in place
  // From the call's allocator: recycled from step to step, no fresh pages per token.
  auto scratch = call.allocator().Allocate(static_cast<size_t>(m * width_) * sizeof(float));
  float* c = static_cast<float*>(scratch.get());
  contrib::NBitsGemm(*w, m, a_float.data(), c, contrib::NBitsPath::kAuto, compute_);
  for (size_t i = 0; i < n_.size(); ++i)
    if (y[i] != nullptr)
      math::CopyColumns(c, m, width_, offset_[i], n_[i], t1, y[i]->mutable_raw_data());
}

OL_KERNEL_FACTORY(MatMulNBitsGroup)

}  // namespace onnx_light::ops
