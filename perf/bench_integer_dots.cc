// Issue 14's question: would integer dot products on the query take the quantized pages'
// decode under the FLOAT multiply-add floor (bench_paged_attention's BM_MultiplyAddFloor)?
// The spec's 1e-5 agreement with dense attention on the reconstructed values needs the
// query at FLOAT precision, so the query is split into three 8-bit limbs (24 bits, what a
// FLOAT mantissa holds) and each limb meets the INT8 keys in a VNNI dot (vpdpbusd: 64
// byte products a cycle against 16 FLOAT multiply-adds). This benchmark-only kernel against
// the product's INT8 dots (math::GroupCodeDots), 4 query heads on 64 keys of 128 in L1,
// each with its largest error against a double-precision reference:
//   ./build/perf/bench_integer_dots
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/math/code_dot.h"
#include "ops/math/cpu_features.h"
#include "ops/math/sum16_avx512.h"
#include "ops/math/x86_intrinsics.h"

namespace {

using namespace onnx_light::ops::math;

constexpr int kHead = 128, kGroup = 4, kRows = 64;
constexpr float kKeyScale = 0.02f;

struct Inputs {
  std::vector<float> q = std::vector<float>(kGroup * kHead);
  std::vector<int8_t> keys = std::vector<int8_t>(kRows * kHead);
  Inputs() {
    std::mt19937 gen(1);
    std::normal_distribution<float> normal(0, 1);
    std::uniform_int_distribution<int> code(-128, 127);
    for (float& x : q) x = normal(gen);
    for (int8_t& k : keys) k = static_cast<int8_t>(code(gen));
  }
  // The largest |s - exact| over the kGroup x kRows scores (s[g * kRows + t]).
  double MaxError(const std::vector<float>& s) const {
    double worst = 0;
    for (int g = 0; g < kGroup; ++g)
      for (int t = 0; t < kRows; ++t) {
        double exact = 0;
        for (int d = 0; d < kHead; ++d)
          exact += double{q[g * kHead + d]} * keys[t * kHead + d] * kKeyScale;
        worst = std::max(worst, std::fabs(s[g * kRows + t] - exact));
      }
    return worst;
  }
};

void BM_FloatDotsInt8(benchmark::State& state) {
  const Inputs in;
  std::vector<float> s(kGroup * kRows);
  const CodeRows run{RowCode::kInt8, in.keys.data(), 0, kRows, kKeyScale, 0.0f};
  for (auto _ : state) {
    GroupCodeDots(in.q.data(), kHead, kGroup, &run, 1, kHead, s.data(), kRows);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.counters["max_abs_error"] = in.MaxError(s);
}

#if defined(__x86_64__)
#define OL_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))

// Query head g as q ~= scale * (2^16 a0 + 2^8 a1 + a2), balanced 8-bit digits. The keys go
// in as unsigned (k + 128), so each lane's products carry 128 * (its digits' sum): `offset`
// holds that per lane, limb 0 alone and limbs 1-2 combined, taken off in integers.
struct QueryLimbs {
  alignas(64) int8_t limb[kGroup][3][kHead];
  alignas(64) int32_t offset[kGroup][2][16];
  float scale[kGroup];
};

QueryLimbs SplitQuery(const float* q) {
  QueryLimbs r;
  for (int g = 0; g < kGroup; ++g) {
    float m = 0;
    for (int d = 0; d < kHead; ++d) m = std::max(m, std::fabs(q[g * kHead + d]));
    r.scale[g] = m / float{127 << 16};
    for (int d = 0; d < kHead; ++d) {
      auto v = static_cast<int32_t>(std::lrint(q[g * kHead + d] / r.scale[g]));
      for (int j = 2; j >= 0; --j) {
        const auto digit = static_cast<int8_t>(v & 0xff);
        r.limb[g][j][d] = digit;
        v = (v - digit) >> 8;
      }
    }
    // Lane l of a vpdpbusd over the two 64-byte halves sums elements 4l..4l+3 of each.
    for (int l = 0; l < 16; ++l) {
      int32_t hi = 0, lo = 0;
      for (int d : {4 * l, 4 * l + 1, 4 * l + 2, 4 * l + 3, 64 + 4 * l, 65 + 4 * l, 66 + 4 * l,
                    67 + 4 * l}) {
        hi += 128 * r.limb[g][0][d];
        lo += 128 * (256 * r.limb[g][1][d] + r.limb[g][2][d]);
      }
      r.offset[g][0][l] = hi;
      r.offset[g][1][l] = lo;
    }
  }
  return r;
}

// One head's dot with keys (k + 128) in k0/k1, as FLOAT: limbs combined in integers where
// they fit (limbs 1-2), then 2^16 * limb 0 + the rest in one multiply-add.
OL_VNNI inline __m512 LimbDot(const QueryLimbs& ql, int g, __m512i k0, __m512i k1) {
  __m512i a[3];
#pragma GCC unroll 3
  for (int j = 0; j < 3; ++j) {
    const auto* limb = reinterpret_cast<const __m512i*>(ql.limb[g][j]);
    a[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k0, _mm512_load_si512(limb));
    a[j] = _mm512_dpbusd_epi32(a[j], k1, _mm512_load_si512(limb + 1));
  }
  const __m512i hi = _mm512_sub_epi32(a[0], _mm512_load_si512(ql.offset[g][0]));
  const __m512i lo = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(a[1], 8), a[2]),
                                      _mm512_load_si512(ql.offset[g][1]));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(lo));
}

OL_VNNI void LimbDots(const QueryLimbs& ql, const int8_t* keys, float* s) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) float lane_scale[16];  // lane 4g + r: head g's
  for (int l = 0; l < 16; ++l) lane_scale[l] = ql.scale[l / 4] * kKeyScale;
  const __m512 scale = _mm512_load_ps(lane_scale);
  for (int t = 0; t < kRows; t += 4) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const int8_t* row = keys + (t + r) * kHead;
      const __m512i k0 = _mm512_xor_si512(_mm512_loadu_si512(row), flip);
      const __m512i k1 = _mm512_xor_si512(_mm512_loadu_si512(row + 64), flip);
#pragma GCC unroll 4
      for (int g = 0; g < kGroup; ++g) acc[r][g] = LimbDot(ql, g, k0, k1);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_mul_ps(Sum16(acc), scale));
    for (int g = 0; g < kGroup; ++g)
      for (int r = 0; r < 4; ++r) s[g * kRows + t + r] = lanes[4 * g + r];
  }
}

// The dots alone: a kernel splits the query once per call, over all of its keys.
void BM_ExactIntegerDotsInt8(benchmark::State& state) {
  if (!CpuHasAvx512Vnni()) {
    state.SkipWithError("no AVX-512 VNNI on this CPU");
    return;
  }
  const Inputs in;
  std::vector<float> s(kGroup * kRows);
  const QueryLimbs ql = SplitQuery(in.q.data());
  for (auto _ : state) {
    LimbDots(ql, in.keys.data(), s.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows);
  state.counters["max_abs_error"] = in.MaxError(s);
}
BENCHMARK(BM_ExactIntegerDotsInt8);
#endif

}  // namespace

BENCHMARK(BM_FloatDotsInt8);
BENCHMARK_MAIN();
