// The row primitives of ops/math/vector_ops.h against plain loops: every length around the
// SIMD widths (8 and 32 floats), strided rows, no rows at all.
#include <doctest/doctest.h>

#include <cmath>
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
      for (int64_t j = 0; j < n; ++j) y[static_cast<size_t>(j)] = want[static_cast<size_t>(j)] = 0.5f * j;
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < n; ++j)
          want[static_cast<size_t>(j)] += w[static_cast<size_t>(t)] * x[static_cast<size_t>(t * stride + j)];
      math::WeightedRowSum(w.data(), rows, x.data(), stride, y.data(), n);
      for (int64_t j = 0; j < n; ++j)
        CHECK(std::abs(y[static_cast<size_t>(j)] - want[static_cast<size_t>(j)]) <= 1e-4f);
    }
}
