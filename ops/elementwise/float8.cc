#include "ops/elementwise/float8.h"

#include <array>
#include <cmath>
#include <limits>

namespace onnx_light::ops::elementwise {

namespace {

struct Format {
  int ebits, mbits, bias;
  bool fnuz;     // no negative zero, no infinity, the only NaN is 0x80
  bool has_inf;  // E5M2: IEEE-like infinities and NaNs
  uint8_t max_code;
};

const Format& FormatOf(core::DataType type) {
  static const Format kE4M3FN{4, 3, 7, false, false, 0x7E};
  static const Format kE4M3FNUZ{4, 3, 8, true, false, 0x7F};
  static const Format kE5M2{5, 2, 15, false, true, 0x7B};
  static const Format kE5M2FNUZ{5, 2, 16, true, false, 0x7F};
  switch (type) {
    case core::DataType::kFloat8E4M3FN:
      return kE4M3FN;
    case core::DataType::kFloat8E4M3FNUZ:
      return kE4M3FNUZ;
    case core::DataType::kFloat8E5M2:
      return kE5M2;
    default:
      return kE5M2FNUZ;
  }
}

float Decode(const Format& f, uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> f.mbits) & ((1 << f.ebits) - 1);
  const int m = code & ((1 << f.mbits) - 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (f.fnuz) {
    if (code == 0x80) return nan;
  } else if (f.has_inf) {
    if (e == (1 << f.ebits) - 1) return m == 0 ? (negative ? -INFINITY : INFINITY) : nan;
  } else if (e == (1 << f.ebits) - 1 && m == (1 << f.mbits) - 1) {
    return nan;
  }
  const float v = e == 0
                      ? std::ldexp(static_cast<float>(m), 1 - f.bias - f.mbits)
                      : std::ldexp(1.f + std::ldexp(static_cast<float>(m), -f.mbits), e - f.bias);
  return negative ? -v : v;
}

// Values of the 256 codes of each format, built once.
const std::array<float, 256>& Table(core::DataType type) {
  auto build = [](core::DataType t) {
    std::array<float, 256> table{};
    for (int c = 0; c < 256; ++c)
      table[static_cast<size_t>(c)] = Decode(FormatOf(t), static_cast<uint8_t>(c));
    return table;
  };
  static const std::array<float, 256> kTables[4] = {
      build(core::DataType::kFloat8E4M3FN), build(core::DataType::kFloat8E4M3FNUZ),
      build(core::DataType::kFloat8E5M2), build(core::DataType::kFloat8E5M2FNUZ)};
  return kTables[static_cast<int>(type) - static_cast<int>(core::DataType::kFloat8E4M3FN)];
}

}  // namespace

bool IsFloat8(core::DataType type) {
  return type == core::DataType::kFloat8E4M3FN || type == core::DataType::kFloat8E4M3FNUZ ||
         type == core::DataType::kFloat8E5M2 || type == core::DataType::kFloat8E5M2FNUZ;
}

float Float8ToFloat(core::DataType type, uint8_t code) { return Table(type)[code]; }

uint8_t FloatToFloat8(core::DataType type, float value, bool saturate) {
  const Format& f = FormatOf(type);
  const auto& table = Table(type);
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  // FNUZ has one NaN (0x80); the others keep the sign (E4M3FN 0x7F, E5M2 0x7E), as
  // ml_dtypes does.
  const uint8_t nan_code = f.fnuz ? 0x80 : static_cast<uint8_t>(sign | (f.has_inf ? 0x7E : 0x7F));
  if (std::isnan(value)) return nan_code;
  const float a = std::fabs(value);
  auto overflow = [&]() -> uint8_t {
    if (saturate) return static_cast<uint8_t>(sign | f.max_code);
    if (f.has_inf) return static_cast<uint8_t>(sign | 0x7C);
    return nan_code;
  };
  // Saturation clips infinities to the largest value (the reference clips before casting).
  if (std::isinf(a)) return saturate || !f.fnuz ? overflow() : nan_code;
  // Largest code whose value is <= a (codes 0..max_code increase monotonically).
  int lo = 0, hi = f.max_code;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[static_cast<size_t>(mid)] <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  const float v_lo = table[static_cast<size_t>(lo)];
  // The value one step above: past max_code, the next step of the same binade.
  const float v_hi = lo < f.max_code ? table[static_cast<size_t>(lo + 1)]
                                     : v_lo + (v_lo - table[static_cast<size_t>(f.max_code - 1)]);
  int code = lo;
  if (a > v_lo) {
    const float below = a - v_lo, above = v_hi - a;
    if (above < below || (above == below && ((lo + 1) & 1) == 0)) code = lo + 1;
  }
  if (code > f.max_code) return overflow();
  if (code == 0 && f.fnuz) return 0;  // no negative zero
  return static_cast<uint8_t>(sign | code);
}

}  // namespace onnx_light::ops::elementwise
