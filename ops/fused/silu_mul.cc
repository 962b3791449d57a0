// ai.onnx_light.fused::SiluMul — what the plan substitutes for the gated SiLU of Llama-style
// MLPs (executor/fusion.cc): Mul(Mul(G, Sigmoid(G)), U) = G * sigmoid(G) * U, with U
// broadcast over rows of G or of G's shape; without U (input absent), G * sigmoid(G).
// Inputs: G, optional U (FLOAT, FLOAT16, BFLOAT16, one type).

#include "ops/fused/row_broadcast.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops {

using core::runtime::KernelCall;
using core::runtime::Tensor;

class SiluMul final : public core::runtime::KernelBase {
 public:
  explicit SiluMul(const core::runtime::KernelContext&) {}

  void Compute(KernelCall& call) const override {
    const Tensor& g = call.input(0);
    const Tensor* u = call.has_input(1) ? &call.input(1) : nullptr;
    if (!math::IsFloatType(g.dtype()) || g.rank() == 0)
      math::ThrowUnsupportedType(call.node(), "input 'G'", g.dtype());
    if (u != nullptr && u->dtype() != g.dtype()) call.Fail("U must have G's element type");
    const int64_t d = g.dim(-1), rows = d == 0 ? 0 : g.numel() / d;
    std::vector<int64_t> u_rows;
    if (u != nullptr) u_rows = fused::RowOffsets(call, g.shape(), u->shape(), "U");
    Tensor& y = call.AllocateOutput(0, g.dtype(), g.shape());
    if (rows == 0) return;
    const math::DataType t = g.dtype();
    const bool wide = t == math::DataType::kFloat;
    const size_t size = core::StorageBytes(t, 1);
    const auto* gp = static_cast<const char*>(g.raw_data());
    const auto* up = u == nullptr ? nullptr : static_cast<const char*>(u->raw_data());
    auto* yp = static_cast<char*>(y.mutable_raw_data());
    math::ParallelFor(rows, std::max<int64_t>(1, 16384 / d), [&](int64_t r0, int64_t r1) {
      // 16-bit rows are widened one at a time here, not whole tensors up front.
      std::vector<float> buffer(wide ? 0 : static_cast<size_t>(3 * d));
      for (int64_t r = r0; r < r1; ++r) {
        const char* g_row = gp + static_cast<size_t>(r * d) * size;
        const char* u_row = up == nullptr
                                ? nullptr
                                : up + static_cast<size_t>(u_rows[static_cast<size_t>(r)]) * size;
        const float* row = reinterpret_cast<const float*>(g_row);
        const float* gate_up = reinterpret_cast<const float*>(u_row);
        float* out = reinterpret_cast<float*>(yp + static_cast<size_t>(r * d) * size);
        if (!wide) {
          math::ToFloat(t, g_row, buffer.data(), d);
          row = buffer.data();
          if (u_row != nullptr) {
            math::ToFloat(t, u_row, buffer.data() + d, d);
            gate_up = buffer.data() + d;
          }
          out = buffer.data() + 2 * d;
        }
        math::VecSigmoid(row, out, d);  // the Sigmoid kernel's function, vectorised
        for (int64_t j = 0; j < d; ++j)
          out[j] = gate_up ? row[j] * out[j] * gate_up[j] : row[j] * out[j];
        if (!wide) math::FromFloat(out, t, yp + static_cast<size_t>(r * d) * size, d);
      }
    });
  }
};

OL_KERNEL_FACTORY(SiluMul)

}  // namespace onnx_light::ops
