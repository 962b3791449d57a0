#include "ops/contrib/skip_norm.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace onnx_light::ops::contrib {

using core::runtime::KernelCall;
using core::runtime::Shape;
using core::runtime::Tensor;

namespace {

// skip must equal input's trailing dimensions (leading ones may be missing or 1).
void CheckSkip(const KernelCall& call, const Tensor& input, const Tensor& skip) {
  bool ok = skip.rank() >= 1 && skip.rank() <= input.rank();
  bool leading = true;  // still in skip's leading broadcast dimensions
  for (int64_t i = 0; ok && i < skip.rank(); ++i) {
    const int64_t in_dim = input.dim(input.rank() - skip.rank() + i);
    if (leading && skip.dim(i) == 1 && in_dim != 1 && i + 1 < skip.rank()) continue;
    leading = false;
    ok = skip.dim(i) == in_dim;
  }
  if (!ok)
    call.Fail("input 'skip' of shape " + core::runtime::ShapeToString(skip.shape()) +
              " does not broadcast to input's " + core::runtime::ShapeToString(input.shape()));
}

}  // namespace

const Tensor* SkipNormBase::Optional(KernelCall& call, int index, const char* what,
                                     int64_t hidden) const {
  if (index < 0 || !call.has_input(static_cast<size_t>(index))) return nullptr;
  const Tensor& t = call.input(static_cast<size_t>(index));
  if (!math::IsFloatType(t.dtype()))
    math::ThrowUnsupportedType(call.node(), std::string("input '") + what + "'", t.dtype());
  if (t.numel() != hidden)
    call.Fail(std::string("input '") + what + "' must have " + std::to_string(hidden) +
              " elements (the hidden size), got " + core::runtime::ShapeToString(t.shape()));
  return &t;
}

void SkipNormBase::Compute(KernelCall& call) const {
  const Tensor& input = call.input(0);
  const Tensor& skip = call.input(1);
  if (!math::IsFloatType(input.dtype()) || input.rank() == 0)
    math::ThrowUnsupportedType(call.node(), "input 'input'", input.dtype());
  if (skip.dtype() != input.dtype())
    math::ThrowUnsupportedType(call.node(), "input 'skip' (must match 'input')", skip.dtype());
  CheckSkip(call, input, skip);
  const int64_t hidden = input.dim(-1);
  const Tensor* gamma = Optional(call, 2, "gamma", hidden);
  if (gamma == nullptr) call.Fail("input 'gamma' is required");
  const Tensor* beta = Optional(call, beta_input_, "beta", hidden);
  const Tensor* bias = Optional(call, bias_input_, "bias", hidden);
  const int64_t rows = hidden == 0 ? 0 : input.numel() / hidden;

  Tensor& out = call.AllocateOutput(0, input.dtype(), input.shape());
  Shape stat_shape = input.shape();
  stat_shape.back() = 1;
  float* mean =
      call.output_wanted(1)
          ? call.AllocateOutput(1, core::DataType::kFloat, stat_shape).mutable_data<float>()
          : nullptr;
  float* inv_std =
      call.output_wanted(2)
          ? call.AllocateOutput(2, core::DataType::kFloat, stat_shape).mutable_data<float>()
          : nullptr;
  Tensor* sum_out =
      call.output_wanted(3) ? &call.AllocateOutput(3, input.dtype(), input.shape()) : nullptr;
  if (rows == 0) return;

  const math::FloatView xv(input), sv(skip), gv(*gamma);
  std::optional<math::FloatView> bv, biasv;
  if (beta) bv.emplace(*beta);
  if (bias) biasv.emplace(*bias);
  math::FloatSink ov(out);
  std::optional<math::FloatSink> sumv;
  if (sum_out) sumv.emplace(*sum_out);
  const int64_t skip_numel = skip.numel();
  math::ParallelFor(rows, std::max<int64_t>(1, 16384 / hidden), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = xv.data() + r * hidden;
      const float* s = sv.data() + (r * hidden) % skip_numel;
      // The sum goes straight to its output when wanted, else into the output row itself.
      float* sum = sumv ? sumv->data() + r * hidden : ov.data() + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) sum[j] = x[j] + s[j];
      if (biasv)
        for (int64_t j = 0; j < hidden; ++j) sum[j] += biasv->data()[j];
      const RowStats stats = NormalizeRow(sum, hidden, gv.data(), bv ? bv->data() : nullptr,
                                          epsilon_, simplified_, ov.data() + r * hidden);
      if (mean) mean[r] = stats.mean;
      if (inv_std) inv_std[r] = stats.inv_std;
    }
  });
  ov.Finish();
  if (sumv) sumv->Finish();
}

}  // namespace onnx_light::ops::contrib
