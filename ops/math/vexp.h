// Vectorised e^x over float arrays, and the elementwise functions built directly on it
// (softmax's shifted exp-and-sum, sigmoid, tanh). Scalar std::exp costs ~5 ns per element
// and dominated Sigmoid (SiLU) and Softmax in LLM prompts; these run 8 (AVX2/FMA) or 16
// (AVX-512F) lanes at a time, chosen at run time, with a portable libm fallback.
//
// Accuracy of the vector paths (checked by tests/cpp/ops_math/test_vexp.cc against double):
//   Exp: <= 1.5e-7 relative for normal results; results below FLT_MIN underflow gradually
//        (subnormals, within one subnormal step), exactly 0 below ln(2^-150) ~ -103.97 and
//        for -inf; +inf above ln(FLT_MAX) ~ 88.72 and for +inf; NaN stays NaN.
//   Sigmoid: <= 3e-7 relative (computed as e/(1+e) or 1/(1+e) with e = exp(-|x|), so it
//        never overflows); 0 and 1 at -inf/+inf; NaN stays NaN.
//   Tanh: <= 3e-7 relative (an odd polynomial near 0, (1-e)/(1+e) with e = exp(-2|x|)
//        elsewhere); +-1 at +-inf; NaN stays NaN; -0 stays -0.
// Every function allows y == x (in place); other overlaps are not allowed.
#pragma once

#include <cstdint>

namespace onnx_light::ops::math {

// Which implementation runs. kAvx512 falls back to kAvx2 without AVX-512F, kAvx2 to
// kPortable without AVX2/FMA; kAuto is the best the CPU has. Tests force each one.
enum class VecPath { kAuto, kPortable, kAvx2, kAvx512 };

// The path kAuto resolves to on this CPU after fallbacks (for tests and benchmarks).
VecPath ResolveVecPath(VecPath path);

// y[i] = e^x[i].
void VecExp(const float* x, float* y, int64_t n, VecPath path = VecPath::kAuto);

// y[i] = e^(x[i] - shift); returns the sum of the y[i] accumulated in double. Softmax's
// middle pass (shift = the row's maximum).
double VecExpShiftSum(const float* x, float shift, float* y, int64_t n,
                      VecPath path = VecPath::kAuto);

// y[i] = 1 / (1 + e^-x[i]).
void VecSigmoid(const float* x, float* y, int64_t n, VecPath path = VecPath::kAuto);

// y[i] = tanh(x[i]).
void VecTanh(const float* x, float* y, int64_t n, VecPath path = VecPath::kAuto);

}  // namespace onnx_light::ops::math
