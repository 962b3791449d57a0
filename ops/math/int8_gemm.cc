#include "ops/math/int8_gemm.h"

#include <algorithm>
#include <cstring>

#include "ops/math/common.h"
#include "ops/math/cpu_features.h"
#include "ops/math/x86_intrinsics.h"

namespace onnx_light::ops::math {

namespace {

constexpr int64_t kStrip = 16;      // columns per strip (one int32 vector)
constexpr int64_t kRowsTile = 4;    // rows of A per tile
constexpr int64_t kStripsTile = 4;  // strips per tile

// B is stored in groups of kStripsTile strips, each group's 64-byte pieces in the order a tile
// reads them (k group q, then strip s of the group), so a tile streams one contiguous range:
// byte (col % 16) * 4 + k % 4 of piece (q, s) of group g holds B[k][col], k = 4q + k % 4,
// col = 16 (4g + s) + col % 16.
constexpr int64_t GroupOffset(int64_t q, int64_t s) { return (q * kStripsTile + s) * kStrip * 4; }

int32_t ByteAt(const void* p, bool is_signed, int64_t i) {
  return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
}

// The tile's raw sums sum_k a' b' of `rows` rows (a' at a + r * a_stride, 4 * k4 bytes) and
// `strips` strips of one group (b: the group's first byte) into raw[r][64].
void TilePortable(const uint8_t* a, int64_t a_stride, int64_t rows, const int8_t* b, int64_t strips,
                  int64_t k4, int32_t (*raw)[64]) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < strips; ++s)
      for (int64_t col = 0; col < kStrip; ++col) {
        int32_t acc = 0;
        for (int64_t q = 0; q < k4; ++q)
          for (int64_t j = 0; j < 4; ++j)
            acc += a[r * a_stride + 4 * q + j] * b[GroupOffset(q, s) + col * 4 + j];
        raw[r][s * kStrip + col] = acc;
      }
}

#if defined(__x86_64__)
#define OL_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// The same with vpdpbusd: R x S accumulators, each A group of 4 bytes broadcast once for the
// S strips and each 64 bytes of B loaded once for the R rows.
template <int R, int S>
OL_VNNI void TileVnni(const uint8_t* a, int64_t a_stride, const int8_t* b, int64_t k4,
                      int32_t (*raw)[64]) {
  __m512i acc[R][S];
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) acc[r][s] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; ++q) {
    __m512i av[R];
    for (int r = 0; r < R; ++r) {
      int32_t word;
      std::memcpy(&word, a + r * a_stride + 4 * q, 4);
      av[r] = _mm512_set1_epi32(word);
    }
    for (int s = 0; s < S; ++s) {
      const __m512i bv = _mm512_loadu_si512(b + GroupOffset(q, s));
      for (int r = 0; r < R; ++r) acc[r][s] = _mm512_dpbusd_epi32(acc[r][s], av[r], bv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) _mm512_storeu_si512(raw[r] + kStrip * s, acc[r][s]);
}

template <int R>
void TileVnniRows(const uint8_t* a, int64_t a_stride, const int8_t* b, int64_t strips, int64_t k4,
                  int32_t (*raw)[64]) {
  switch (strips) {
    case 1:
      return TileVnni<R, 1>(a, a_stride, b, k4, raw);
    case 2:
      return TileVnni<R, 2>(a, a_stride, b, k4, raw);
    case 3:
      return TileVnni<R, 3>(a, a_stride, b, k4, raw);
    default:
      return TileVnni<R, 4>(a, a_stride, b, k4, raw);
  }
}

void Tile(const uint8_t* a, int64_t a_stride, int64_t rows, const int8_t* b, int64_t strips,
          int64_t k4, int32_t (*raw)[64], bool vnni) {
  if (!vnni) return TilePortable(a, a_stride, rows, b, strips, k4, raw);
  switch (rows) {
    case 1:
      return TileVnniRows<1>(a, a_stride, b, strips, k4, raw);
    case 2:
      return TileVnniRows<2>(a, a_stride, b, strips, k4, raw);
    case 3:
      return TileVnniRows<3>(a, a_stride, b, strips, k4, raw);
    default:
      return TileVnniRows<4>(a, a_stride, b, strips, k4, raw);
  }
}
#else
void Tile(const uint8_t* a, int64_t a_stride, int64_t rows, const int8_t* b, int64_t strips,
          int64_t k4, int32_t (*raw)[64], bool) {
  TilePortable(a, a_stride, rows, b, strips, k4, raw);
}
#endif

}  // namespace

PackedInt8B::PackedInt8B(const void* b, bool b_signed, int64_t k, int64_t n, int64_t ldb,
                         const void* b_zero, int64_t zero_count)
    : k_(k), n_(n), k4_((k + 3) / 4), strips_((n + kStrip - 1) / kStrip) {
  const int32_t shift = b_signed ? 0 : 128;  // b' = b - shift is signed
  const int64_t groups = (strips_ + kStripsTile - 1) / kStripsTile;
  data_.assign(static_cast<size_t>(groups * k4_ * kStripsTile * kStrip * 4), 0);
  col_sums_.assign(static_cast<size_t>(strips_ * kStrip), 0);
  beta_.assign(static_cast<size_t>(strips_ * kStrip), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t col = 0; col < n; ++col) {
      const int32_t v = ByteAt(b, b_signed, kk * ldb + col) - shift;
      const int64_t strip = col / kStrip;
      const int64_t at = strip / kStripsTile * k4_ * kStripsTile * kStrip * 4 +
                         GroupOffset(kk / 4, strip % kStripsTile) + col % kStrip * 4 + kk % 4;
      data_[static_cast<size_t>(at)] = static_cast<int8_t>(v);
      col_sums_[static_cast<size_t>(col)] += v;
    }
  for (int64_t col = 0; col < n; ++col) {
    const int32_t zero = zero_count == 0 ? 0 : ByteAt(b_zero, b_signed, zero_count == 1 ? 0 : col);
    beta_[static_cast<size_t>(col)] = shift - zero;
  }
}

namespace {

// The products, each element handed to store(row, column, exact int32 value).
template <class Store>
void Int8GemmTo(const PackedInt8B& b, int64_t m, const void* a, bool a_signed, int64_t lda,
                const void* a_zero, int64_t a_zero_count, VecPath path, const Store& store) {
  const bool vnni = path != VecPath::kPortable && CpuHasAvx512Vnni();
  const int64_t k = b.k(), n = b.n(), k4 = b.k4(), strips = b.strips(), width = 4 * k4;
  // A shifted to unsigned (a' = a + 128 for INT8), rows padded with zeros to 4 * k4 bytes,
  // and each row's sum and alpha = shift + zero point.
  const int32_t shift = a_signed ? 128 : 0;
  std::vector<uint8_t> rows(static_cast<size_t>(m * width), 0);
  std::vector<int64_t> row_sums(static_cast<size_t>(m)), alpha(static_cast<size_t>(m));
  const auto* bytes = static_cast<const uint8_t*>(a);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* out = rows.data() + r * width;
    const uint8_t* in = bytes + r * lda;
    int64_t sum = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      out[kk] = static_cast<uint8_t>(in[kk] ^ (a_signed ? 0x80 : 0));
      sum += out[kk];
    }
    row_sums[static_cast<size_t>(r)] = sum;
    const int32_t zero =
        a_zero_count == 0 ? 0 : ByteAt(a_zero, a_signed, a_zero_count == 1 ? 0 : r);
    alpha[static_cast<size_t>(r)] = shift + zero;
  }
  const int64_t row_tiles = (m + kRowsTile - 1) / kRowsTile;
  const int64_t strip_tiles = (strips + kStripsTile - 1) / kStripsTile;
  const int64_t group_bytes = k4 * kStripsTile * kStrip * 4;
  // At least 128 KiB of B per task: a decode step's small products (a KV projection is 110 KB
  // at 576 x 192) run on one thread instead of paying a wake-up for microseconds of work.
  const int64_t grain = std::max<int64_t>(1, (int64_t{128} << 10) / group_bytes);
  ParallelFor(row_tiles * strip_tiles, grain, [&](int64_t t0, int64_t t1) {
    int32_t raw[kRowsTile][64];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = t / strip_tiles * kRowsTile, s0 = t % strip_tiles * kStripsTile;
      const int64_t nr = std::min(kRowsTile, m - m0), ns = std::min(kStripsTile, strips - s0);
      Tile(rows.data() + m0 * width, width, nr, b.data() + s0 / kStripsTile * group_bytes, ns, k4,
           raw, vnni);
      // sum (a - za)(b - zb) = raw + beta * sum a' - alpha * sum b' - alpha * beta * K, in
      // 64-bit and wrapped to int32 as the reference's int32 arithmetic wraps.
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t sa = row_sums[static_cast<size_t>(m0 + r)];
        const int64_t al = alpha[static_cast<size_t>(m0 + r)];
        for (int64_t j = 0; j < ns * kStrip; ++j) {
          const int64_t col = s0 * kStrip + j;
          if (col >= n) break;
          const int64_t be = b.beta()[col];
          const int64_t v = raw[r][j] + be * sa - al * b.col_sums()[col] - al * be * k;
          store(m0 + r, col, static_cast<int32_t>(static_cast<uint32_t>(v)));
        }
      }
    }
  });
}

}  // namespace

void Int8Gemm(const PackedInt8B& b, int64_t m, const void* a, bool a_signed, int64_t lda,
              const void* a_zero, int64_t a_zero_count, int32_t* c, int64_t ldc, VecPath path) {
  Int8GemmTo(b, m, a, a_signed, lda, a_zero, a_zero_count, path,
             [&](int64_t r, int64_t col, int32_t v) { c[r * ldc + col] = v; });
}

void Int8GemmToFloat(const PackedInt8B& b, int64_t m, const void* a, bool a_signed, int64_t lda,
                     const void* a_zero, int64_t a_zero_count, const float* scale,
                     int64_t scale_count, float* y, int64_t ldy, VecPath path) {
  Int8GemmTo(b, m, a, a_signed, lda, a_zero, a_zero_count, path,
             [&](int64_t r, int64_t col, int32_t v) {
               y[r * ldy + col] = static_cast<float>(v) * scale[scale_count == 1 ? 0 : col];
             });
}

}  // namespace onnx_light::ops::math
