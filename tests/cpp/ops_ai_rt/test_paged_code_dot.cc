// math::GroupCodeDots / GroupCodeWeightedRowSums (ops/math/code_dot.h), the code-domain reads
// of PagedAttention: every row format against a naive double reference on the reconstructed
// values (math::CodeValue, checked itself against the affine formula), with odd widths,
// several runs of different lengths, scales and zero points, head counts around the kernels'
// groups of four, and packed rows that do not start on a byte (the portable path).
//
// Tolerance: |got - reference| <= 1e-6 * (sum of |terms|) + 1e-6, i.e. FLOAT accumulation
// error of the sums (the reference is exact in double); the scale is applied once per dot
// and once per weight, so nothing larger is expected.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/math/code_dot.h"
#include "paged_fixtures.h"

namespace {

using onnx_light::ops::math::CodeRows;
using onnx_light::ops::math::CodeValue;
using onnx_light::ops::math::GroupCodeDots;
using onnx_light::ops::math::GroupCodeWeightedRowSums;
using onnx_light::ops::math::RowCode;
using onnx_light::ops::math::VecPath;

struct Format {
  RowCode code;
  const char* name;
  int bits;  // per element
  int32_t lo, hi;
  bool affine;
};

const Format kFormats[] = {
    {RowCode::kFloat, "FLOAT", 32, 0, 0, false},       {RowCode::kHalf, "FLOAT16", 16, 0, 0, false},
    {RowCode::kBFloat16, "BFLOAT16", 16, 0, 0, false}, {RowCode::kInt8, "INT8", 8, -128, 127, true},
    {RowCode::kUint8, "UINT8", 8, 0, 255, true},       {RowCode::kInt4, "INT4", 4, -8, 7, true},
    {RowCode::kUint4, "UINT4", 4, 0, 15, true},        {RowCode::kInt2, "INT2", 2, -2, 1, true},
    {RowCode::kUint2, "UINT2", 2, 0, 3, true},
};

// Storage for `count` elements of `f`, element e from code(e) (affine) or value(e) (dense).
struct Payload {
  std::vector<uint8_t> bytes;
  std::vector<double> expect;  // the value of each element, by the format's own formula
};

Payload Make(const Format& f, int64_t count, float scale, int32_t zero, uint32_t seed) {
  Payload p;
  p.bytes.assign(static_cast<size_t>((count * f.bits + 7) / 8 + 8), 0);
  p.expect.resize(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) {
    const float x = paged_test::Noise(seed, e);
    double value = 0;
    if (!f.affine) {
      if (f.code == RowCode::kFloat) {
        std::memcpy(p.bytes.data() + 4 * e, &x, 4);
        value = x;
      } else {
        const uint16_t h = f.code == RowCode::kHalf ? onnx_light::core::FloatToHalf(x)
                                                    : onnx_light::core::FloatToBFloat16(x);
        std::memcpy(p.bytes.data() + 2 * e, &h, 2);
        value = f.code == RowCode::kHalf ? onnx_light::core::HalfToFloat(h)
                                         : onnx_light::core::BFloat16ToFloat(h);
      }
    } else {
      const int32_t span = f.hi - f.lo + 1;
      const int32_t c =
          f.lo + static_cast<int32_t>((x + 1.0f) * 0.5f * static_cast<float>(span)) % span;
      const auto u = static_cast<uint32_t>(c) & ((f.bits == 32 ? 0u : (1u << f.bits)) - 1u);
      const int per_byte = 8 / f.bits;
      p.bytes[static_cast<size_t>(e / per_byte)] |=
          static_cast<uint8_t>(u << (f.bits * (e % per_byte)));
      value = (static_cast<double>(c) - zero) * static_cast<double>(scale);
    }
    p.expect[static_cast<size_t>(e)] = value;
  }
  return p;
}

struct Case {
  int64_t d, heads;
  std::vector<int64_t> rows;  // per run
  int64_t first;              // element offset of each run's first row in its payload
};

void CheckFormat(const Format& f, const Case& cs, VecPath path) {
  CAPTURE(f.name);
  CAPTURE(static_cast<int>(path));
  CAPTURE(cs.d);
  CAPTURE(cs.heads);
  CAPTURE(cs.first);
  const int64_t d = cs.d, heads = cs.heads;
  std::vector<Payload> payloads;
  std::vector<CodeRows> runs;
  int64_t total = 0;
  for (size_t r = 0; r < cs.rows.size(); ++r) {
    const float scale = f.affine ? 0.01f + 0.07f * static_cast<float>(r) : 1.0f;
    const int32_t zero = f.affine ? std::min(f.hi, f.lo + static_cast<int32_t>(r) % 3) : 0;
    payloads.push_back(
        Make(f, cs.first + cs.rows[r] * d, scale, zero, 11 + static_cast<uint32_t>(r)));
    total += cs.rows[r];
  }
  for (size_t r = 0; r < cs.rows.size(); ++r) {
    const float scale = f.affine ? 0.01f + 0.07f * static_cast<float>(r) : 1.0f;
    const int32_t zero = f.affine ? std::min(f.hi, f.lo + static_cast<int32_t>(r) % 3) : 0;
    runs.push_back(
        {f.code, payloads[r].bytes.data(), cs.first, cs.rows[r], scale, static_cast<float>(zero)});
    // Every other run asks the kernels to prefetch rows as it reads (its own: any rows of
    // its layout would do); the results must not change.
    if (r % 2 == 0) runs.back().ahead = onnx_light::ops::math::RunBytes(runs.back());
  }
  // CodeValue is the format's formula.
  for (size_t r = 0; r < runs.size(); ++r)
    for (int64_t t = 0; t < runs[r].rows; ++t)
      for (int64_t j = 0; j < d; ++j)
        REQUIRE(CodeValue(runs[r], t, j, d) ==
                doctest::Approx(payloads[r].expect[static_cast<size_t>(cs.first + t * d + j)])
                    .epsilon(1e-6));
  auto value = [&](int64_t at, int64_t j) {  // row `at` of the concatenated runs
    for (size_t r = 0; r < runs.size(); at -= runs[r++].rows)
      if (at < runs[r].rows) return payloads[r].expect[static_cast<size_t>(cs.first + at * d + j)];
    return 0.0;
  };

  // Dots: q [heads, d] with stride d + 3 (an inner stride, as a query's heads have).
  const int64_t q_stride = d + 3, s_stride = total + 2;
  std::vector<float> q(static_cast<size_t>(heads * q_stride));
  for (size_t i = 0; i < q.size(); ++i) q[i] = paged_test::Noise(5, static_cast<int64_t>(i));
  std::vector<float> s(static_cast<size_t>(heads * s_stride), -7.0f);
  GroupCodeDots(q.data(), q_stride, heads, runs.data(), static_cast<int>(runs.size()), d, s.data(),
                s_stride, path);
  for (int64_t g = 0; g < heads; ++g)
    for (int64_t t = 0; t < total; ++t) {
      double ref = 0, mag = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double term = q[static_cast<size_t>(g * q_stride + j)] * value(t, j);
        ref += term;
        mag += std::abs(term);
      }
      CHECK(std::abs(s[static_cast<size_t>(g * s_stride + t)] - ref) <= 1e-6 * mag + 1e-6);
    }
  for (int64_t g = 0; g < heads; ++g)  // nothing written past the rows
    CHECK(s[static_cast<size_t>(g * s_stride + total)] == -7.0f);

  // Weighted sums: y [heads, d] (stride d + 1) = y * rescale + sum_t w * value.
  const int64_t w_stride = total + 1, y_stride = d + 1;
  std::vector<float> w(static_cast<size_t>(heads * w_stride)),
      y(static_cast<size_t>(heads * y_stride));
  std::vector<float> rescale(static_cast<size_t>(heads));
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.5f + 0.5f * paged_test::Noise(6, static_cast<int64_t>(i));
  for (size_t i = 0; i < y.size(); ++i) y[i] = paged_test::Noise(7, static_cast<int64_t>(i));
  for (size_t g = 0; g < rescale.size(); ++g) rescale[g] = g % 2 == 0 ? 1.0f : 0.25f;
  const std::vector<float> w0 = w, y0 = y;
  GroupCodeWeightedRowSums(w.data(), w_stride, heads, runs.data(), static_cast<int>(runs.size()), d,
                           rescale.data(), y.data(), y_stride, path);
  for (int64_t g = 0; g < heads; ++g)
    for (int64_t j = 0; j < d; ++j) {
      double ref = y0[static_cast<size_t>(g * y_stride + j)] * rescale[static_cast<size_t>(g)];
      double mag = std::abs(ref);
      for (int64_t t = 0; t < total; ++t) {
        const double term = w0[static_cast<size_t>(g * w_stride + t)] * value(t, j);
        ref += term;
        mag += std::abs(term);
      }
      CHECK(std::abs(y[static_cast<size_t>(g * y_stride + j)] - ref) <= 1e-6 * mag + 1e-6);
    }
  // The weights were scaled in place by their run's scale (documented: caller's scratch).
  int64_t at = 0;
  for (const CodeRows& run : runs)
    for (int64_t t = 0; t < run.rows; ++t, ++at)
      CHECK(w[static_cast<size_t>(at)] == doctest::Approx(w0[static_cast<size_t>(at)] * run.scale));
}

}  // namespace

TEST_CASE(
    "Code-domain dots and value sums equal the reference on reconstructed values for every row "
    "format, width, head count, run split and kernel (within 1e-6 of the sums' magnitude)") {
  const std::vector<Case> cases = {
      {128, 4, {16, 16, 16, 16}, 0},  // the benchmark's shape: one block of four full pages
      {128, 4, {16, 5}, 0},           // a partial last page
      {128, 3, {7, 1}, 0},            // GQA group of 3, odd row counts (single-row tail)
      {80, 2, {6, 3}, 0},             // AVX-512: one strip of 64 columns and one of 16
      {16, 8, {3, 16}, 0},            // two groups of four heads
      {24, 5, {2, 2, 1}, 0},          // a strip of 16 and one of 8; 4 + 1 heads
      {12, 2, {5}, 0},                // 8 lanes and a scalar tail of 4
      {13, 1, {4, 3}, 0},             // odd width: packed formats take the portable path
      {8, 4, {1}, 0},                 // one row
      {16, 4, {6, 2}, 8},             // rows that start inside the payload
      {7, 2, {3}, 1},                 // packed rows that start inside a byte (portable path)
      {1, 4, {9}, 0},                 // width 1
  };
  // Every kernel this CPU has: AVX-512 (widths of whole 16-lane chunks), AVX2, portable.
  for (VecPath path : {VecPath::kAvx512, VecPath::kAvx2, VecPath::kPortable})
    for (const Format& f : kFormats)
      for (const Case& cs : cases) CheckFormat(f, cs, path);
}

TEST_CASE("Weighted sums without a rescale leave y's running sum and accumulate into it") {
  const Format& f = kFormats[5];  // INT4
  Payload p = Make(f, 2 * 16, 0.25f, 3, 9);
  CodeRows run{f.code, p.bytes.data(), 0, 2, 0.25f, 3.0f};
  std::vector<float> w = {1.0f, 0.5f};
  std::vector<float> y(16, 1.0f);
  GroupCodeWeightedRowSums(w.data(), 2, 1, &run, 1, 16, nullptr, y.data(), 16);
  for (int64_t j = 0; j < 16; ++j)
    CHECK(y[static_cast<size_t>(j)] == doctest::Approx(1.0 + p.expect[static_cast<size_t>(j)] +
                                                       0.5 * p.expect[static_cast<size_t>(16 + j)])
                                           .epsilon(1e-6));
}

TEST_CASE(
    "AVX-512 code-domain kernels: 4-bit heads wider than the laid-out query (512 elements), "
    "runs of one code merged in one call, and single-row tails, against the reference") {
  // Beyond 512 elements a head the 4-bit dots interleave each query chunk as they read it
  // instead of once per call; 5 and 3 rows leave single rows after the groups of four.
  const std::vector<Case> cases = {
      {528, 4, {5, 3}, 0},
      {512, 3, {4, 1}, 0},
      {1024, 2, {2, 2}, 0},
  };
  for (VecPath path : {VecPath::kAuto, VecPath::kAvx512})
    for (const Format& f : kFormats)
      for (const Case& cs : cases) CheckFormat(f, cs, path);
}
