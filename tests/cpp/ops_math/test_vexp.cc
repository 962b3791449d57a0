#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "op_test_util.h"
#include "ops/math/vexp.h"

using namespace ops_math_test;
namespace math = onnx_light::ops::math;

namespace {

// Every implementation (each falls back to the next simpler one on a CPU without it).
constexpr math::VecPath kAllPaths[] = {math::VecPath::kPortable, math::VecPath::kAvx2,
                                       math::VecPath::kAvx512};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kFltMax = std::numeric_limits<float>::max();
constexpr double kFltMin = std::numeric_limits<float>::min();          // smallest normal
constexpr double kSubStep = std::numeric_limits<float>::denorm_min();  // 2^-149

// Every `stride`-th float bit pattern in [lo, hi] (both signs handled), plus lo and hi.
std::vector<float> Sweep(float lo, float hi, uint32_t stride) {
  std::vector<float> v;
  auto add_range = [&](float a, float b) {  // 0 <= a <= b
    for (uint64_t u = std::bit_cast<uint32_t>(a); u <= std::bit_cast<uint32_t>(b); u += stride)
      v.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  };
  if (lo < 0) {
    const size_t start = v.size();
    add_range(hi < 0 ? -hi : 0.0f, -lo);
    for (size_t i = start; i < v.size(); ++i) v[i] = -v[i];
  }
  if (hi >= 0) add_range(lo > 0 ? lo : 0.0f, hi);
  v.push_back(lo);
  v.push_back(hi);
  return v;
}

// Largest error over `x` of `fn` against the double reference `ref`, in units of
// `rel` relative error for normal results; results below FLT_MIN must be within one
// subnormal step. Reports the worst input.
struct Worst {
  double rel = 0;
  float at = 0;
};
Worst CheckAgainst(const std::vector<float>& x, const std::vector<float>& y,
                   const std::function<double(double)>& ref, double rel_tol) {
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = ref(x[i]);
    const double a = y[i];
    if (std::abs(e) > kFltMax * (1 + 0x1p-24)) {
      if (!std::isinf(a)) {
        INFO("x = " << x[i] << ": expected inf, got " << a);
        CHECK(false);
        return w;
      }
      continue;
    }
    if (std::abs(e) < kFltMin) {
      if (!(std::abs(a - e) <= kSubStep)) {
        INFO("x = " << x[i] << ": subnormal result " << a << " vs " << e);
        CHECK(false);
        return w;
      }
      continue;
    }
    const double rel = std::abs(a - e) / std::abs(e);
    if (!(rel <= w.rel)) {  // also catches NaN
      w.rel = std::isnan(rel) ? INFINITY : rel;
      w.at = x[i];
    }
  }
  INFO("worst relative error " << w.rel << " at x = " << w.at);
  CHECK(w.rel <= rel_tol);
  return w;
}

std::vector<float> Run(void (*fn)(const float*, float*, int64_t, math::VecPath),
                       const std::vector<float>& x, math::VecPath path) {
  std::vector<float> y(x.size());
  fn(x.data(), y.data(), static_cast<int64_t>(x.size()), path);
  return y;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("vector exp: within 1.5e-7 relative of exp over a dense sweep of floats, every path") {
  // ~4.5 million inputs over the whole range where e^x is neither 0 nor inf, and beyond.
  const std::vector<float> x = Sweep(-110.0f, 95.0f, 487);
  REQUIRE(x.size() > 4000000);
  for (math::VecPath path : kAllPaths) {
    CAPTURE(static_cast<int>(path));
    CheckAgainst(
        x, Run(math::VecExp, x, path), [](double v) { return std::exp(v); }, 1.5e-7);
  }
  CHECK(SameBits(Run(math::VecExp, x, math::VecPath::kAvx512),
                 Run(math::VecExp, x, math::VecPath::kAvx2)));
}

TEST_CASE("vector exp: overflow gives inf, underflow reaches exactly 0, NaN stays NaN") {
  const float ln_max = 0x1.62e42ep+6f;  // 88.72283f: the largest float whose e^x is finite
  const std::vector<float> x = {0.0f,
                                -0.0f,
                                1e-30f,
                                -1e-30f,
                                1.0f,
                                ln_max,
                                std::nextafter(ln_max, kInf),  // e^x > FLT_MAX
                                89.0f,
                                1e30f,
                                std::numeric_limits<float>::max(),
                                kInf,
                                -87.4f,    // e^x just below FLT_MIN: subnormal
                                -103.9f,   // a few subnormal steps
                                -103.98f,  // below 2^-150: rounds to 0
                                -104.0f,
                                -1e4f,
                                -std::numeric_limits<float>::max(),
                                -kInf,
                                std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::quiet_NaN()};
  for (math::VecPath path : kAllPaths) {
    CAPTURE(static_cast<int>(path));
    const std::vector<float> y = Run(math::VecExp, x, path);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == 1.0f);
    CHECK(y[2] == 1.0f);
    CHECK(y[3] == 1.0f);
    CHECK(y[4] == doctest::Approx(M_E).epsilon(1.5e-7));
    CHECK(std::isfinite(y[5]));
    CHECK(y[5] > 3.4e38f);
    for (int i = 6; i <= 10; ++i) CHECK(y[i] == kInf);
    CHECK(y[11] > 0.0f);
    CHECK(y[11] < std::numeric_limits<float>::min());
    CHECK(std::abs(y[11] - std::exp(double{-87.4f})) <= kSubStep);
    CHECK(y[12] > 0.0f);
    CHECK(std::abs(y[12] - std::exp(double{-103.9f})) <= kSubStep);
    for (int i = 13; i <= 17; ++i) CHECK(y[i] == 0.0f);
    CHECK(std::isnan(y[18]));
    CHECK(std::isnan(y[19]));
  }
}

TEST_CASE("vector sigmoid: within 3e-7 relative over a dense sweep, 0, 1 and NaN at the ends") {
  const std::vector<float> x = Sweep(-110.0f, 30.0f, 487);
  for (math::VecPath path : kAllPaths) {
    CAPTURE(static_cast<int>(path));
    CheckAgainst(x, Run(math::VecSigmoid, x, path), RefSigmoid, 3e-7);
    const std::vector<float> edges = {
        -kInf, kInf, -200.0f, 200.0f, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
    const std::vector<float> y = Run(math::VecSigmoid, edges, path);
    CHECK(y[0] == 0.0f);
    CHECK(y[1] == 1.0f);
    CHECK(y[2] == 0.0f);
    CHECK(y[3] == 1.0f);
    CHECK(y[4] == 0.5f);
    CHECK(y[5] == 0.5f);
    CHECK(std::isnan(y[6]));
  }
  CHECK(SameBits(Run(math::VecSigmoid, x, math::VecPath::kAvx512),
                 Run(math::VecSigmoid, x, math::VecPath::kAvx2)));
}

TEST_CASE("vector tanh: within 3e-7 relative over a dense sweep, odd, +-1 at the ends") {
  const std::vector<float> x = Sweep(-12.0f, 12.0f, 487);
  for (math::VecPath path : kAllPaths) {
    CAPTURE(static_cast<int>(path));
    CheckAgainst(
        x, Run(math::VecTanh, x, path), [](double v) { return std::tanh(v); }, 3e-7);
    // Around the switch from the polynomial to the exp form.
    const std::vector<float> mid = Sweep(0.6f, 0.65f, 1);
    CheckAgainst(
        mid, Run(math::VecTanh, mid, path), [](double v) { return std::tanh(v); }, 3e-7);
    const std::vector<float> edges = {-kInf,  kInf,    -20.0f,
                                      20.0f,  0.0f,    -0.0f,
                                      1e-40f, -1e-40f, std::numeric_limits<float>::quiet_NaN()};
    const std::vector<float> y = Run(math::VecTanh, edges, path);
    CHECK(y[0] == -1.0f);
    CHECK(y[1] == 1.0f);
    CHECK(y[2] == -1.0f);
    CHECK(y[3] == 1.0f);
    CHECK(y[4] == 0.0f);
    CHECK(!std::signbit(y[4]));
    CHECK(y[5] == 0.0f);
    CHECK(std::signbit(y[5]));
    CHECK(y[6] == 1e-40f);
    CHECK(y[7] == -1e-40f);
    CHECK(std::isnan(y[8]));
  }
  CHECK(SameBits(Run(math::VecTanh, x, math::VecPath::kAvx512),
                 Run(math::VecTanh, x, math::VecPath::kAvx2)));
}

TEST_CASE("vector functions handle lengths across the vector widths, in place and out") {
  using Fn = void (*)(const float*, float*, int64_t, math::VecPath);
  const std::pair<Fn, double (*)(double)> fns[] = {
      {math::VecExp, [](double v) { return std::exp(v); }},
      {math::VecSigmoid, RefSigmoid},
      {math::VecTanh, [](double v) { return std::tanh(v); }}};
  for (math::VecPath path : kAllPaths)
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 1000}) {
      CAPTURE(static_cast<int>(path));
      CAPTURE(n);
      const std::vector<float> x = Random(n, -20, 20);
      for (const auto& [fn, ref] : fns) {
        // Out of place: the element after the last must not be written.
        std::vector<float> y(static_cast<size_t>(n + 1), -7.0f);
        fn(x.data(), y.data(), n, path);
        CHECK(y[static_cast<size_t>(n)] == -7.0f);
        y.pop_back();
        std::vector<double> expected;
        for (float v : x) expected.push_back(ref(v));
        CheckClose(y, expected, 3e-7, 0);
        // In place gives the same bits.
        std::vector<float> z = x;
        fn(z.data(), z.data(), n, path);
        CHECK(SameBits(z, y));
      }
    }
}

TEST_CASE("shifted exp-and-sum: exp(x - shift) and the sum of exactly the n outputs") {
  for (math::VecPath path : kAllPaths)
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000}) {
      CAPTURE(static_cast<int>(path));
      CAPTURE(n);
      const std::vector<float> x = Random(n, -30, 5);
      std::vector<float> y(static_cast<size_t>(n + 1), -7.0f);
      // A very negative shift: lanes past the end would be huge if they reached the sum.
      for (float shift : {5.0f, -60.0f}) {
        const double sum = math::VecExpShiftSum(x.data(), shift, y.data(), n, path);
        CHECK(y[static_cast<size_t>(n)] == -7.0f);
        double expected_sum = 0, actual_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double e = std::exp(static_cast<double>(x[i] - shift));
          CHECK(std::abs(y[i] - e) <= 1.5e-7 * e);
          expected_sum += e;
          actual_sum += y[i];
        }
        CHECK(sum == doctest::Approx(actual_sum).epsilon(1e-12));
        CHECK(sum == doctest::Approx(expected_sum).epsilon(2e-7));
      }
    }
}
