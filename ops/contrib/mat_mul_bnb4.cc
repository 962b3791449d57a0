// com.microsoft MatMulBnb4 (what onnxruntime's MatMulBnb4Quantizer writes, the Hub's
// `model_bnb4` files): Y[..., N] = A[..., K] x W^T with W [N, K] in bitsandbytes' 4-bit codes,
// flattened, two per byte, the even flat index in the high nibble:
//   W[n, k] = codebook[code(n K + k)] * absmax[(n K + k) / block_size]
// codebook FP4 (quant_type 0) or NF4 (quant_type 1), the 16 values onnxruntime's CPU kernel
// uses (tests/python/test_hub_variants.py reads them back from it). A, absmax and Y FLOAT or
// FLOAT16 (computed in FLOAT). Few rows (decode) run a GEMV over the codes: each 32 codes are
// looked up with two vector permutes of the codebook and met with A's even and odd elements;
// more rows run the packed SGEMM on panels decoded as it reaches them. Nothing is kept
// beside the file's 4-bit weight. Attributes: K, N, block_size, quant_type; training_mode 1
// and transB 0 are refused.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "executor/attributes.h"
#include "executor/parallel.h"
#include "ops/kernel_factory.h"
#include "ops/math/common.h"
#include "ops/math/cpu_features.h"
#include "ops/math/gemm.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops {

using core::DataType;
using core::runtime::KernelCall;
using core::runtime::Tensor;

namespace {

alignas(64) constexpr float kFp4[16] = {
    0.0f,  1.0f / 192,  2.0f / 3,  1.0f,  1.0f / 3,  0.5f,  1.0f / 6,  0.25f,
    -0.0f, -1.0f / 192, -2.0f / 3, -1.0f, -1.0f / 3, -0.5f, -1.0f / 6, -0.25f};
alignas(64) constexpr float kNf4[16] = {-1.0f,
                                        -0.6961928009986877f,
                                        -0.5250730514526367f,
                                        -0.39491748809814453f,
                                        -0.28444138169288635f,
                                        -0.18477343022823334f,
                                        -0.09105003625154495f,
                                        0.0f,
                                        0.07958029955625534f,
                                        0.16093020141124725f,
                                        0.24611230194568634f,
                                        0.33791524171829224f,
                                        0.44070982933044434f,
                                        0.5626170039176941f,
                                        0.7229568362236023f,
                                        1.0f};

constexpr int64_t kGemvMaxRows = 4;

// The weight as the kernels read it.
struct Bnb4 {
  const uint8_t* codes;
  const float* absmax;
  const float* table;
  int64_t n, k, block;
  float At(int64_t flat) const {
    const uint8_t byte = codes[flat / 2];
    return table[(flat & 1) ? (byte & 15) : (byte >> 4)] * absmax[flat / block];
  }
  // Rows of whole blocks of whole 32-code steps: the vector path.
  bool Aligned() const { return k % 32 == 0 && block % 32 == 0 && k % block == 0; }
};

// y[r][n] for columns [n0, n1), element by element.
void GemvPortable(const Bnb4& w, const float* a, int64_t m, int64_t n0, int64_t n1, float* y) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t r = 0; r < m; ++r) {
      float s = 0;
      for (int64_t k = 0; k < w.k; ++k) s += a[r * w.k + k] * w.At(n * w.k + k);
      y[r * w.n + n] = s;
    }
}

#if defined(__x86_64__)
#define OL_BNB4_512 __attribute__((target("avx512f,avx2,fma")))

// `even`/`odd`: each row of A split into its even and odd elements (K / 2 each), the order in
// which a 16-byte load meets the codes (byte i: code 2i high, code 2i + 1 low).
template <int M>
OL_BNB4_512 void GemvAvx512(const Bnb4& w, const float* even, const float* odd, int64_t n0,
                            int64_t n1, float* y) {
  const __m512 table = _mm512_load_ps(w.table);
  const int64_t half = w.k / 2;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.codes + n * half;
    const float* scale = w.absmax + n * w.k / w.block;
    __m512 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < w.k; k0 += w.block) {
      __m512 block[M];
      for (int r = 0; r < M; ++r) block[r] = _mm512_setzero_ps();
      for (int64_t k = k0; k < k0 + w.block; k += 32) {
        const __m512i bytes =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2)));
        // The permute reads the low 4 bits of each lane: the low nibble as loaded.
        const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
        const __m512 lo = _mm512_permutexvar_ps(bytes, table);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
          block[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(even + r * half + k / 2), block[r]);
          block[r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(odd + r * half + k / 2), block[r]);
        }
      }
      const __m512 s = _mm512_set1_ps(scale[k0 / w.block]);
      for (int r = 0; r < M; ++r) acc[r] = _mm512_fmadd_ps(block[r], s, acc[r]);
    }
    for (int r = 0; r < M; ++r) y[r * w.n + n] = _mm512_reduce_add_ps(acc[r]);
  }
}
#endif

void Gemv(const Bnb4& w, const float* a, int64_t m, float* y) {
  const int64_t grain = std::max<int64_t>(1, 16384 / w.k);
#if defined(__x86_64__)
  if (w.Aligned() && math::CpuHasAvx512()) {
    const int64_t half = w.k / 2;
    std::vector<float> even(static_cast<size_t>(m * half)), odd(even.size());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < half; ++i) {
        even[static_cast<size_t>(r * half + i)] = a[r * w.k + 2 * i];
        odd[static_cast<size_t>(r * half + i)] = a[r * w.k + 2 * i + 1];
      }
    core::runtime::ParallelFor(w.n, grain, [&](int64_t n0, int64_t n1) {
      switch (m) {
        case 1:
          return GemvAvx512<1>(w, even.data(), odd.data(), n0, n1, y);
        case 2:
          return GemvAvx512<2>(w, even.data(), odd.data(), n0, n1, y);
        case 3:
          return GemvAvx512<3>(w, even.data(), odd.data(), n0, n1, y);
        default:
          return GemvAvx512<4>(w, even.data(), odd.data(), n0, n1, y);
      }
    });
    return;
  }
#endif
  core::runtime::ParallelFor(w.n, grain,
                             [&](int64_t n0, int64_t n1) { GemvPortable(w, a, m, n0, n1, y); });
}

#if defined(__x86_64__)
// out[0, count) = W's flat elements [flat, flat + count): whole 32-code steps inside blocks
// (flat and count multiples of 32, block a multiple of 32).
OL_BNB4_512 void DecodeAvx512(const Bnb4& w, int64_t flat, int64_t count, float* out) {
  const __m512 table = _mm512_load_ps(w.table);
  // Even codes (high nibbles) and odd ones back into order: e0 o0 e1 o1 ...
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t i = 0; i < count; i += 32) {
    const __m512i bytes = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.codes + (flat + i) / 2)));
    const __m512 s = _mm512_set1_ps(w.absmax[(flat + i) / w.block]);
    const __m512 hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table), s);
    const __m512 lo = _mm512_mul_ps(_mm512_permutexvar_ps(bytes, table), s);
    _mm512_storeu_ps(out + i, _mm512_permutex2var_ps(hi, first, lo));
    _mm512_storeu_ps(out + i + 16, _mm512_permutex2var_ps(hi, second, lo));
  }
}
#endif

// out[0, count) = W's flat elements [flat, flat + count).
void Decode(const Bnb4& w, int64_t flat, int64_t count, float* out) {
#if defined(__x86_64__)
  if (flat % 32 == 0 && count % 32 == 0 && w.block % 32 == 0 && math::CpuHasAvx512())
    return DecodeAvx512(w, flat, count, out);
#endif
  for (int64_t i = 0; i < count; ++i) out[i] = w.At(flat + i);
}

// Y = A W^T for more rows: W^T [K, N] decoded into the SGEMM's panels as it reaches them
// (row n of W, depth p0 .. p0 + kc, is column n of the panel).
void Gemm(const Bnb4& w, const float* a, int64_t m, float* y) {
  math::GemmArgs g;
  g.m = m;
  g.n = w.n;
  g.k = w.k;
  g.a = a;
  g.lda = w.k;
  g.c = y;
  g.ldc = w.n;
  math::SgemmFromPanels(g, [&](int64_t p0, int64_t kc, int64_t j0, int64_t j1, float* out) {
    std::vector<float> column(static_cast<size_t>(kc));
    for (int64_t n = j0; n < j1; ++n) {
      Decode(w, n * w.k + p0, kc, column.data());
      float* panel = out + (n - j0) / math::kPanelColumns * math::kPanelColumns * kc;
      const int64_t j = (n - j0) % math::kPanelColumns;
      for (int64_t p = 0; p < kc; ++p)
        panel[p * math::kPanelColumns + j] = column[static_cast<size_t>(p)];
    }
  });
}

}  // namespace

class MatMulBnb4 final : public core::runtime::KernelBase {
 public:
  explicit MatMulBnb4(const core::runtime::KernelContext&) {}
  // A 4-bit LM head on generate's prompt step multiplies the last row alone.
  bool ComputesLastRowOnly() const override { return true; }

  void Compute(KernelCall& call) const override {
    Tensor a_dense, a_last;
    const Tensor& a_full =
        call.input(0).contiguous() ? call.input(0) : (a_dense = call.input(0).Contiguous());
    const Tensor& a = call.last_row_only() ? math::LastRows(call, a_full, a_last) : a_full;
    const DataType t1 = a.dtype();
    if (t1 != DataType::kFloat && t1 != DataType::kFloat16)
      math::ThrowUnsupportedType(call.node(), "input 'A' (FLOAT or FLOAT16)", t1);
    if (a.rank() < 1 || a.dim(-1) != k_)
      call.Fail("input 'A' " + core::runtime::ShapeToString(a.shape()) +
                " must end in K = " + std::to_string(k_));
    const Tensor& b = call.input(1);
    const Tensor& absmax = call.input(2);
    if (b.dtype() != DataType::kUint8 || b.numel() != (n_ * k_ + 1) / 2)
      call.Fail("input 'B' must be UINT8 with (N * K + 1) / 2 = " +
                std::to_string((n_ * k_ + 1) / 2) + " elements, got " +
                core::DataTypeName(b.dtype()) + " " + core::runtime::ShapeToString(b.shape()));
    if (absmax.dtype() != t1 || absmax.numel() != (n_ * k_ - 1) / block_ + 1)
      call.Fail("input 'absmax' must be " + core::DataTypeName(t1) +
                " (A's type) with (N * K + block_size - 1) / block_size = " +
                std::to_string((n_ * k_ - 1) / block_ + 1) + " elements, got " +
                core::DataTypeName(absmax.dtype()) + " " +
                core::runtime::ShapeToString(absmax.shape()));
    core::runtime::Shape shape = a.shape();
    shape.back() = n_;
    Tensor& y = call.AllocateOutput(0, t1, shape);
    const int64_t m = a.numel() / k_;
    if (m == 0) return;
    const math::FloatView av(a), scales(absmax);
    math::FloatSink sink(y);
    const Bnb4 w{b.data<uint8_t>(), scales.data(), quant_type_ == 0 ? kFp4 : kNf4, n_, k_, block_};
    if (m <= kGemvMaxRows)
      Gemv(w, av.data(), m, sink.data());
    else
      Gemm(w, av.data(), m, sink.data());
    sink.Finish();
  }

 protected:
  void Configure(const NodeProto& node) override {
    using namespace core::runtime;
    k_ = RequiredAttrInt(node, "K");
    n_ = RequiredAttrInt(node, "N");
    block_ = RequiredAttrInt(node, "block_size");
    quant_type_ = RequiredAttrInt(node, "quant_type");
    if (k_ <= 0 || n_ <= 0 || block_ <= 0)
      Throw(core::ErrorCode::kInvalidModel,
            NodeLabel(node) + ": K, N and block_size must be positive");
    if (k_ > (int64_t{1} << 62) / n_)  // (N * K + block_size - 1) must not overflow
      Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": N * K = " + std::to_string(n_) +
                                                " * " + std::to_string(k_) + " is too large");
    if (quant_type_ != 0 && quant_type_ != 1)
      Throw(core::ErrorCode::kInvalidModel, NodeLabel(node) + ": quant_type " +
                                                std::to_string(quant_type_) +
                                                " is neither 0 (FP4) nor 1 (NF4)");
    if (AttrInt(node, "training_mode", 0) != 0)
      Throw(core::ErrorCode::kNotImplemented,
            NodeLabel(node) + ": training_mode 1 is not supported");
    if (AttrInt(node, "transB", 1) != 1)
      Throw(core::ErrorCode::kNotImplemented, NodeLabel(node) + ": transB 0 is not supported");
  }

 private:
  int64_t k_ = 0, n_ = 0, block_ = 64, quant_type_ = 1;
};

OL_KERNEL_FACTORY(MatMulBnb4)

}  // namespace onnx_light::ops
