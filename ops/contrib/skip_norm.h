// The shared body of com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization
// (one kernel file each). Semantics: onnxruntime's docs/ContribOperators.md and its CPU kernel
// (contrib_ops/cpu/skip_layer_norm.cc):
//   s = input + skip [+ bias];  output = LayerNorm(s) * gamma [+ beta]  (or RMS norm)
// over the last axis. skip is input's shape or broadcasts over its leading dimensions (e.g.
// [S, H] against [B, S, H]). Outputs: output; optional mean and inv_std_var (FLOAT, input's
// shape with the last dimension 1; onnxruntime's CPU kernel leaves these two unwritten);
// optional input_skip_bias_sum (s). Each optional output is produced only when requested.
#pragma once

#include <string>

#include "executor/attributes.h"
#include "ops/contrib/norm_rows.h"
#include "ops/math/common.h"

namespace onnx_light::ops::contrib {

class SkipNormBase : public core::runtime::KernelBase {
 public:
  // `beta_input`: index of beta (none: -1); `bias_input`: index of bias.
  SkipNormBase(bool simplified, int beta_input, int bias_input)
      : simplified_(simplified), beta_input_(beta_input), bias_input_(bias_input) {}

  void Compute(core::runtime::KernelCall& call) const override;

 protected:
  void Configure(const NodeProto& node) override {
    epsilon_ = core::runtime::AttrFloat(node, "epsilon", 1e-12f);
  }

 private:
  const core::runtime::Tensor* Optional(core::runtime::KernelCall& call, int index,
                                        const char* what, int64_t hidden) const;

  bool simplified_;
  int beta_input_, bias_input_;
  float epsilon_ = 1e-12f;
};

}  // namespace onnx_light::ops::contrib
