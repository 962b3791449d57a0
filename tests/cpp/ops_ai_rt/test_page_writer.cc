// ops/ai_rt/page_writer.h: EncodePage writes a page's valid rows in its format and fills
// every spare row with the encoding of 0 (the zero point's code for affine formats, +0 for
// dense ones), whatever the code width and the zero point's sign.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "onnx_light.pb.h"
#include "ops/ai_rt/page_writer.h"

using namespace onnx_light;
using core::DataType;

namespace {

constexpr int64_t kHeads = 2, kCapacity = 4, kRows = 1, kWidth = 6;

// Element e of an encoded page's codes.
int32_t Code(const core::runtime::RuntimeValue& page, DataType storage, int64_t e) {
  const std::string& bytes = page.encoded().raw_data();
  if (storage == DataType::kInt8) return static_cast<int8_t>(bytes[static_cast<size_t>(e)]);
  if (storage == DataType::kUint8) return static_cast<uint8_t>(bytes[static_cast<size_t>(e)]);
  return core::PackedGet(storage, bytes.data(), e);
}

}  // namespace

TEST_CASE("EncodePage writes the valid rows' codes and the zero point's code in every spare row") {
  // Row r of head h, element d: (h + 1) * (d - 2.5) * 0.4, so codes differ by head and element.
  std::vector<float> rows(kHeads * kRows * kWidth);
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t d = 0; d < kWidth; ++d)
      rows[static_cast<size_t>(h * kWidth + d)] = static_cast<float>(h + 1) * (d - 2.5f) * 0.4f;
  const ops::ai_rt::RowSource src{rows.data(), kHeads * kRows * kWidth, kRows * kWidth};
  struct Case {
    DataType storage;
    int32_t zero, lo, hi;
  };
  for (const Case& c : {Case{DataType::kInt8, -3, -128, 127}, Case{DataType::kUint8, 200, 0, 255},
                        Case{DataType::kInt4, -2, -8, 7}, Case{DataType::kUint4, 5, 0, 15},
                        Case{DataType::kInt2, -1, -2, 1}, Case{DataType::kUint2, 2, 0, 3}}) {
    CAPTURE(core::DataTypeName(c.storage));
    const ops::ai_rt::PageFormat format{c.storage, 0.5f, c.zero};
    size_t written = 0;
    const auto page = ops::ai_rt::EncodePage(format, src, 1, kHeads, kCapacity, kWidth, kRows,
                                             core::runtime::DefaultAllocator(), &written);
    CHECK(written == core::StorageBytes(c.storage, kHeads * kRows * kWidth));
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t r = 0; r < kCapacity; ++r)
        for (int64_t d = 0; d < kWidth; ++d) {
          const int64_t e = (h * kCapacity + r) * kWidth + d;
          int32_t expected = c.zero;
          if (r < kRows) {
            const float x = rows[static_cast<size_t>(h * kWidth + d)];
            expected =
                std::clamp(static_cast<int32_t>(std::nearbyint(x / 0.5f)) + c.zero, c.lo, c.hi);
          }
          CHECK_MESSAGE(Code(page, c.storage, e) == expected, "head ", h, " row ", r, " elem ", d);
        }
  }
  for (DataType storage : {DataType::kFloat16, DataType::kBFloat16}) {
    size_t written = 0;
    const auto page = ops::ai_rt::EncodePage({storage, 1.0f, 0}, src, 1, kHeads, kCapacity, kWidth,
                                             kRows, core::runtime::DefaultAllocator(), &written);
    const auto* halves = static_cast<const uint16_t*>(page.tensor().raw_data());
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t r = 0; r < kCapacity; ++r)
        for (int64_t d = 0; d < kWidth; ++d) {
          const uint16_t bits = halves[(h * kCapacity + r) * kWidth + d];
          const float x = rows[static_cast<size_t>(h * kWidth + d)];
          const uint16_t expected =
              r >= kRows ? 0
                         : (storage == DataType::kFloat16 ? core::FloatToHalf(x)
                                                          : core::FloatToBFloat16(x));
          CHECK(bits == expected);
        }
  }
}
