// Block-quantized weights (com.microsoft MatMulNBits: 4 or 8 bits, blocks of 16..256 along
// K, a scale and a zero point per column and block) repacked once for CPU products:
//   W[k, n] = (q[n, k] - zp[n, kb]) * scale[n, kb],  kb = k / block.
// Layout: columns in tiles of 16 (the last zero padded); per tile and block, for 4 bits
// each pair of rows (k, k+1) takes 16 bytes (byte j = q[col j][k] | q[col j][k+1] << 4), for
// 8 bits each row 16 bytes. So the GEMV reads one tile's weights in one sequential run and
// one load feeds 16 columns (two 8-lane AVX2 accumulators). The zero point is folded out of
// the inner loop: y[n] += scale * sum_k(a_k q_k) - scale * zp * sum_k(a_k) per block, with
// -scale * zp kept per column and block only when the model gives zero points (otherwise zp
// is the same 2^(bits-1) everywhere and the packed copy is no bigger than onnxruntime's).
// Rows of K past the end of the weight (K not a multiple of the block) hold zeros, and the
// activations are zero padded to match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace onnx_light::ops::contrib {

// kAvx512: the int8 GEMV on AVX-512 VNNI + VBMI (kInt8 only; other products take AVX2).
enum class NBitsPath { kAuto, kPortable, kAvx2, kAvx512 };

constexpr int64_t kNBitsTile = 16;  // columns per packed weight tile
constexpr int64_t kInt8Group = 32;  // activation values per int8 scale (kInt8)
// How far ahead of their reads the int8 kernels ask for the packed weights (and for their
// scales, 64 bytes a block of 256 weight bytes, a quarter as far). The weights stream from
// memory, and the integer work between two loads kept too few of them in flight: with the
// hardware prefetcher alone, the int4 decode of Qwen2.5-0.5B's shape (309 MB of weights a
// token) read at 57% of the two-thread read rate. Measured there (Intel Xeon, VNNI, 2
// threads, p50 of 60 steps): none 18.4-19.3 ms, 512 B 17.2, 1 KiB 16.1, 2 KiB 15.1-15.3, 3 KiB
// 14.6-15.5, 4 KiB 15.6, 6 KiB 15.5; one thread 35.1 -> 26.8 ms at 2 KiB. bench_nbits_gemv
// from memory, one thread, 896 x 4864: VNNI 152 -> 120 us, AVX2 161 -> 122 us. The FLOAT
// GEMV (accuracy_level 0) stalled the same way: an 896 x 151936 int4 head, 2 threads, 10.84
// -> 4.38 ms. Past the last tile this names memory that may not be ours: a prefetch never
// faults.
constexpr int64_t kNBitsWeightsAhead = 2048;

// kInt8 (MatMulNBits accuracy_level 4, as onnxruntime): the activation row is quantized to
// int8 in groups of 32 (scale = max|a| / 127, round to nearest even) and the GEMV sums
// integer products of 4-bit weights and int8 activations (AVX-512 VNNI + VBMI: vpermt2b puts
// 16 columns x 4 rows in vpdpbusd's order, 128 weights per 10 instructions; else AVX2
// maddubs, 64 weights per 11); the block's float scale and the group's scale are applied per
// group. Only
// for 4 bits with block_size a multiple of 32 (Int8Eligible); otherwise the float path runs.
// M > 4 rows take NBitsGemmInt8 on CPUs with AVX-512 VNNI, the float path elsewhere. Results
// are exact integer sums, so every int8 code path agrees bit for bit.
enum class NBitsCompute { kFloat, kInt8 };

// The source tensors as MatMulNBits takes them (B [N, k_blocks, block*bits/8] uint8,
// scales [N * k_blocks], zero points absent / packed uint8 / float).
struct NBitsSource {
  int bits = 4;
  int64_t n = 0, k = 0, block = 32;
  const uint8_t* b = nullptr;
  const float* scales = nullptr;
  const uint8_t* zp_packed = nullptr;  // 4 bits: ceil(k_blocks / 2) bytes per column
  const float* zp_float = nullptr;
};

class PackedNBits {
 public:
  explicit PackedNBits(const NBitsSource& src);
  PackedNBits(const PackedNBits&) = delete;
  PackedNBits& operator=(const PackedNBits&) = delete;

  int bits() const { return bits_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t block() const { return block_; }
  int64_t k_blocks() const { return k_blocks_; }
  int64_t tiles() const { return tiles_; }
  size_t bytes() const;
  int64_t block_bytes() const { return block_bytes_; }  // of one tile's block
  // Weights of tile t, block kb: 16 * block * bits / 8 bytes.
  const uint8_t* weights(int64_t t, int64_t kb) const {
    return q_.data() + static_cast<size_t>((t * k_blocks_ + kb) * block_bytes_);
  }
  // 16 scales of tile t, block kb.
  const float* scales(int64_t t, int64_t kb) const {
    return scale_.data() + (t * k_blocks_ + kb) * 16;
  }
  // 16 (-scale * zero point) of tile t, block kb; null when every zero point is uniform_zp().
  const float* neg_scaled_zp(int64_t t, int64_t kb) const {
    return nszp_.empty() ? nullptr : nszp_.data() + (t * k_blocks_ + kb) * 16;
  }
  float uniform_zp() const { return uniform_zp_; }

 private:
  int bits_;
  int64_t n_, k_, block_, k_blocks_, tiles_, block_bytes_;
  float uniform_zp_;
  std::vector<uint8_t> q_;
  std::vector<float> scale_, nszp_;
};

// y[n] (+)= sum_k a[k] W[k, n] for tiles [t0, t1): `a_pad` is A zero padded to k_blocks *
// block, `a_sums` its per-block sums; writes y[n] for n < N only (bias not included).
void NBitsGemvTiles(const PackedNBits& w, const float* a_pad, const float* a_sums, float* y,
                    int64_t t0, int64_t t1, NBitsPath path);

bool Int8Eligible(const PackedNBits& w);

// y[N] = a[K] W (one activation row), parallel over column tiles.
void NBitsGemv(const PackedNBits& w, const float* a, float* y, NBitsPath path = NBitsPath::kAuto,
               NBitsCompute compute = NBitsCompute::kFloat);

// C[M, N] = A[M, K] W (row-major, lda = K, ldc = N): GEMV per row for M <= 4 (but kInt8
// takes NBitsGemmInt8 from 2 rows where NBitsGemmInt8FewRows); else, with kInt8 on AVX-512
// VNNI, NBitsGemmInt8; else W dequantized panel by panel straight into the
// packed SGEMM's layout (math::SgemmFromPanels; never the whole weight).
void NBitsGemm(const PackedNBits& w, int64_t m, const float* a, float* c,
               NBitsPath path = NBitsPath::kAuto, NBitsCompute compute = NBitsCompute::kFloat);

// C[M, N] = A W with int8 activations (nbits_gemm_int8.cc): each row of C equals the kInt8
// GEMV of that row bit for bit. False, with nothing written, when w is not Int8Eligible or
// the CPU lacks AVX-512 VNNI.
bool NBitsGemmInt8(const PackedNBits& w, int64_t m, const float* a, float* c);
// Whether NBitsGemmInt8 reads each weight tile once for all of m rows in registers (m <= 8
// with AVX-512 VBMI): then it beats one GEMV per row even for 2-4 rows.
bool NBitsGemmInt8FewRows(int64_t m);

// The int8 activation row of kInt8 (exposed for tests): q[k] and one scale per 32 values.
void QuantizeActivations(const float* a, int64_t k, int64_t k_pad, int8_t* q, float* scales);
// The scalar code of QuantizeActivations, which equals it bit for bit on every CPU (tests).
void QuantizeActivationsPortable(const float* a, int64_t k, int64_t k_pad, int8_t* q,
                                 float* scales);
// The same, plus the sum of q per group of 32 (the zero-point term): `sums` has k_pad / 32
// entries.
void QuantizeActivationsWithSums(const float* a, int64_t k, int64_t k_pad, int8_t* q, float* scales,
                                 int32_t* sums);

// The float value W[k, n] (tests and references).
float NBitsWeight(const PackedNBits& w, int64_t k, int64_t n);

}  // namespace onnx_light::ops::contrib
