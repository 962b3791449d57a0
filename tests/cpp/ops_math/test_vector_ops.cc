// The row primitives of ops/math/vector_ops.h against plain loops: every length around the
// SIMD widths (8 and 32 floats), head counts around the passes of 3 and 2 heads, strided
// rows, no rows at all.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/math/vector_ops.h"

namespace math = onnx_light::ops::math;

TEST_CASE("WeightedRowSum adds the weighted rows to y for every length and stride") {
  for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 64, 100})
    for (int64_t rows : {0, 1, 5, 32}) {
      CAPTURE(n);
      CAPTURE(rows);
      const int64_t stride = n + 3;
      std::vector<float> x(static_cast<size_t>(std::max<int64_t>(rows, 1) * stride));
      std::vector<float> w(static_cast<size_t>(std::max<int64_t>(rows, 1)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 13) - 6.0f;
      for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
      std::vector<float> y(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j)
        y[static_cast<size_t>(j)] = want[static_cast<size_t>(j)] = 0.5f * j;
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < n; ++j)
          want[static_cast<size_t>(j)] +=
              w[static_cast<size_t>(t)] * x[static_cast<size_t>(t * stride + j)];
      math::WeightedRowSum(w.data(), rows, x.data(), stride, y.data(), n);
      for (int64_t j = 0; j < n; ++j)
        CHECK(std::abs(y[static_cast<size_t>(j)] - want[static_cast<size_t>(j)]) <= 1e-4f);
    }
}

namespace {

float Pattern(size_t i, int mod, float offset) {
  return static_cast<float>((i * 7) % mod) - offset;
}

}  // namespace

TEST_CASE("GroupDots scores every head against every key row for all head and key counts") {
  for (int64_t d : {8, 12, 64})
    for (int64_t heads : {1, 2, 3, 4, 5, 7})
      for (int64_t keys : {1, 3, 4, 9, 64}) {
        CAPTURE(d);
        CAPTURE(heads);
        CAPTURE(keys);
        const int64_t q_stride = d + 8, k_stride = d + 16, s_stride = keys + 5;
        std::vector<float> q(static_cast<size_t>(heads * q_stride));
        std::vector<float> k(static_cast<size_t>(keys * k_stride));
        for (size_t i = 0; i < q.size(); ++i) q[i] = Pattern(i, 11, 5.0f);
        for (size_t i = 0; i < k.size(); ++i) k[i] = Pattern(i, 13, 6.0f) * 0.5f;
        std::vector<float> s(static_cast<size_t>(heads * s_stride), -7.0f);
        math::GroupDots(q.data(), q_stride, heads, k.data(), k_stride, keys, d, s.data(), s_stride);
        for (int64_t g = 0; g < heads; ++g) {
          for (int64_t t = 0; t < keys; ++t) {
            float want = 0;
            for (int64_t i = 0; i < d; ++i)
              want += q[static_cast<size_t>(g * q_stride + i)] *
                      k[static_cast<size_t>(t * k_stride + i)];
            CHECK(s[static_cast<size_t>(g * s_stride + t)] == doctest::Approx(want).epsilon(1e-5));
          }
          for (int64_t t = keys; t < s_stride; ++t)  // nothing written past the keys
            CHECK(s[static_cast<size_t>(g * s_stride + t)] == -7.0f);
        }
      }
}

TEST_CASE("GroupWeightedRowSums adds each head's weighted value rows to its output") {
  for (int64_t n : {8, 32, 64, 96})
    for (int64_t heads : {1, 2, 3, 5})
      for (int64_t rows : {0, 1, 7, 64}) {
        CAPTURE(n);
        CAPTURE(heads);
        CAPTURE(rows);
        const int64_t x_stride = n + 4, w_stride = rows + 3, y_stride = n + 8;
        std::vector<float> x(static_cast<size_t>(std::max<int64_t>(rows, 1) * x_stride));
        std::vector<float> w(static_cast<size_t>(heads * w_stride));
        for (size_t i = 0; i < x.size(); ++i) x[i] = Pattern(i, 13, 6.0f);
        for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
        std::vector<float> y(static_cast<size_t>(heads * y_stride));
        for (size_t i = 0; i < y.size(); ++i) y[i] = 0.5f * static_cast<float>(i);
        std::vector<float> want = y;
        for (int64_t g = 0; g < heads; ++g)
          for (int64_t t = 0; t < rows; ++t)
            for (int64_t j = 0; j < n; ++j)
              want[static_cast<size_t>(g * y_stride + j)] +=
                  w[static_cast<size_t>(g * w_stride + t)] *
                  x[static_cast<size_t>(t * x_stride + j)];
        math::GroupWeightedRowSums(w.data(), w_stride, heads, x.data(), x_stride, rows, y.data(),
                                   y_stride, n);
        for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - want[i]) <= 1e-3f);
      }
}

TEST_CASE("GroupWeightedRowSums over runs of rows equals it over the same rows in one run") {
  for (int64_t n : {8, 32, 64})
    for (int64_t heads : {1, 2, 3}) {
      CAPTURE(n);
      CAPTURE(heads);
      const int64_t run_rows[] = {3, 0, 16, 5};
      const int64_t rows = 24, w_stride = rows + 1;
      std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(heads * w_stride));
      for (size_t i = 0; i < x.size(); ++i) x[i] = Pattern(i, 11, 4.0f);
      for (size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * static_cast<float>(i % 7) - 0.25f;
      // The runs live apart (copies), as pages do.
      std::vector<std::vector<float>> pages;
      std::vector<const float*> bases;
      int64_t t0 = 0;
      for (int64_t r : run_rows) {
        pages.emplace_back(x.begin() + t0 * n, x.begin() + (t0 + r) * n);
        pages.back().push_back(0.0f);  // never empty, so data() is a real address
        bases.push_back(pages.back().data());
        t0 += r;
      }
      std::vector<float> want(static_cast<size_t>(heads * n), 1.0f), got = want;
      math::GroupWeightedRowSums(w.data(), w_stride, heads, x.data(), n, rows, want.data(), n, n);
      math::GroupWeightedRowSums(w.data(), w_stride, heads, bases.data(), run_rows, 4, n,
                                 got.data(), n, n);
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-5f);
    }
}

TEST_CASE("ScaleAddMax returns NaN when a live score is NaN, wherever it sits") {
  // max_ps keeps its second operand against a NaN, so a NaN met early was dropped from the
  // running maximum and one in the last vector became it: the attention kernels then
  // returned finite garbage instead of NaN rows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 8, 9, 17, 64})
    for (int64_t at = 0; at < n; ++at) {
      CAPTURE(n);
      CAPTURE(at);
      std::vector<float> s(static_cast<size_t>(n), 1.0f), bias(static_cast<size_t>(n), -3.0f);
      s[static_cast<size_t>(at)] = nan;
      std::vector<float> plain = s;
      CHECK(std::isnan(math::ScaleAddMax(plain.data(), n, 2.0f, nullptr)));
      CHECK(std::isnan(math::ScaleAddMax(s.data(), n, 2.0f, bias.data())));
      // A NaN under a -inf bias is masked out: the key is not attended.
      std::vector<float> masked(static_cast<size_t>(n), 1.0f);
      masked[static_cast<size_t>(at)] = nan;
      bias[static_cast<size_t>(at)] = -inf;
      CHECK(math::ScaleAddMax(masked.data(), n, 2.0f, bias.data()) == (n == 1 ? -inf : -1.0f));
    }
}

TEST_CASE("ScaleAddMax scales, adds the bias, keeps -inf exact and returns the maximum") {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {0, 1, 7, 8, 9, 17}) {
    CAPTURE(n);
    std::vector<float> s(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      s[static_cast<size_t>(t)] =
          t % 3 == 0 ? inf : static_cast<float>(t) - 4.0f;  // +inf * -inf bias
      bias[static_cast<size_t>(t)] = t % 3 == 0 ? -inf : 0.5f * static_cast<float>(t);
    }
    std::vector<float> plain = s;
    std::vector<float> with_bias = s;
    const float m0 = math::ScaleAddMax(plain.data(), n, 2.0f, nullptr);
    const float m1 = math::ScaleAddMax(with_bias.data(), n, 2.0f, bias.data());
    float want0 = -inf, want1 = -inf;
    for (int64_t t = 0; t < n; ++t) {
      const size_t i = static_cast<size_t>(t);
      CHECK(plain[i] == s[i] * 2.0f);
      const float w = t % 3 == 0 ? -inf : s[i] * 2.0f + bias[i];
      CHECK(with_bias[i] == w);
      want0 = std::max(want0, plain[i]);
      want1 = std::max(want1, w);
    }
    CHECK(m0 == want0);
    CHECK(m1 == want1);
  }
}
