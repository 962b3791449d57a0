// com.microsoft GatherBlockQuantized for UINT8 storage (the genai builder's int4 embedding,
// which shares the LM head's MatMulNBits weight). Semantics: onnxruntime's
// docs/ContribOperators.md and its CPU kernel (contrib_ops/cpu/quantization/
// gather_block_quantized.cc): data [rows, cols * bits / 8] holds `bits`-bit values along the
// last axis (4 bits: element 2i in the low nibble), scales [rows, ceil(cols / block_size)],
// optional zero_points packed like data (absent: 2^(bits - 1)); output [indices..., cols]
// with out = (q - zp) * scale. Supported: gather_axis 0, quantize_axis the last axis, bits 4
// or 8, FLOAT scales. Unlike onnxruntime (which writes zeros) an index out of range is an
// error naming the node and the index.
#include <cstring>
#include <vector>

#include "executor/attributes.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Tensor;

class GatherBlockQuantized final : public core::runtime::KernelBase {
 public:
  explicit GatherBlockQuantized(const core::runtime::KernelContext&) {}
  void Compute(KernelCall& call) const override;

 protected:
  void Configure(const NodeProto& node) override {
    using namespace core::runtime;
    gather_axis_ = AttrInt(node, "gather_axis", 0);
    quantize_axis_ = AttrInt(node, "quantize_axis", 1);
    block_ = AttrInt(node, "block_size", 128);
    bits_ = AttrInt(node, "bits", 4);
    if (bits_ != 4 && bits_ != 8)
      Throw(core::ErrorCode::kNotImplemented,
            NodeLabel(node) + ": bits " + std::to_string(bits_) + " is not supported (4 or 8)");
    if (block_ < 16 || (block_ & (block_ - 1)) != 0)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": block_size must be a power of 2 and at least 16, got " +
                std::to_string(block_));
  }

 private:
  // (q - zp) * scale of logical element `col` of data row `row`.
  float Value(const uint8_t* data, const float* scales, const uint8_t* zp, int64_t row, int64_t col,
              int64_t packed_cols, int64_t blocks) const {
    const uint8_t* r = data + row * packed_cols;
    const int q = bits_ == 8 ? r[col] : ((col & 1) ? r[col / 2] >> 4 : r[col / 2] & 0xF);
    const int64_t kb = col / block_;
    int z = 1 << (bits_ - 1);
    if (zp != nullptr) {
      if (bits_ == 8) {
        z = zp[row * blocks + kb];
      } else {
        const uint8_t byte = zp[row * ((blocks + 1) / 2) + kb / 2];
        z = (kb & 1) ? byte >> 4 : byte & 0xF;
      }
    }
    return static_cast<float>(q - z) * scales[row * blocks + kb];
  }

  int64_t gather_axis_ = 0, quantize_axis_ = 1, block_ = 128, bits_ = 4;
};

void GatherBlockQuantized::Compute(KernelCall& call) const {
  const Tensor& data = call.input(0);
  const Tensor& indices = call.input(1);
  const Tensor& scales = call.input(2);
  const Tensor* zp = call.has_input(3) ? &call.input(3) : nullptr;
  if (data.dtype() != DataType::kUint8)
    math::ThrowUnsupportedType(call.node(), "input 'data' (only UINT8 storage)", data.dtype());
  if (scales.dtype() != DataType::kFloat)
    math::ThrowUnsupportedType(call.node(), "input 'scales' (only FLOAT)", scales.dtype());
  if (data.rank() != 2 || math::NormalizeAxis(call.node(), gather_axis_, 2) != 0 ||
      math::NormalizeAxis(call.node(), quantize_axis_, 2) != 1)
    Throw(core::ErrorCode::kNotImplemented,
          core::runtime::NodeLabel(call.node()) +
              ": only 2-D input 'data' with gather_axis 0 and quantize_axis 1 is supported");
  const int64_t rows = data.dim(0), packed_cols = data.dim(1);
  const int64_t cols = packed_cols * 8 / bits_, blocks = (cols + block_ - 1) / block_;
  if (scales.numel() != rows * blocks)
    call.Fail("input 'scales' must be [" + std::to_string(rows) + ", " + std::to_string(blocks) +
              "]");
  const int64_t zp_cols = bits_ == 8 ? blocks : (blocks + 1) / 2;
  if (zp && (zp->dtype() != DataType::kUint8 || zp->numel() != rows * zp_cols))
    call.Fail("input 'zero_points' must be UINT8 [" + std::to_string(rows) + ", " +
              std::to_string(zp_cols) + "]");
  const std::vector<int64_t> ids = math::IntValues(call.node(), indices, "indices");
  core::runtime::Shape shape = indices.shape();
  shape.push_back(cols);
  Tensor& out = call.AllocateOutput(0, DataType::kFloat, shape);
  float* y = out.mutable_data<float>();
  const uint8_t* d = data.data<uint8_t>();
  const float* s = scales.data<float>();
  const uint8_t* z = zp ? zp->data<uint8_t>() : nullptr;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = ids[i] < 0 ? ids[i] + rows : ids[i];
    if (row < 0 || row >= rows)
      call.Fail("index " + std::to_string(ids[i]) + " of input 'indices' is outside [" +
                std::to_string(-rows) + ", " + std::to_string(rows) + ")");
    float* o = y + static_cast<int64_t>(i) * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = Value(d, s, z, row, c, packed_cols, blocks);
  }
}

OL_KERNEL_FACTORY(GatherBlockQuantized)

}  // namespace onnx_light::ops
