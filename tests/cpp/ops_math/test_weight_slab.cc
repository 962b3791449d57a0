#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ops/math/weight_slab.h"

namespace math = onnx_light::ops::math;

TEST_CASE("weight slabs: packs of 1-32 MiB lie one after another, 64-byte aligned, each usable") {
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<std::shared_ptr<void>> blocks;
  for (size_t bytes : {3 * kMiB / 2, 2 * kMiB + 8, 7 * kMiB, kMiB})
    blocks.push_back(math::AllocateWeightStorage(bytes));
  for (size_t i = 0; i < blocks.size(); ++i) {
    CHECK(reinterpret_cast<uintptr_t>(blocks[i].get()) % 64 == 0);
    std::memset(blocks[i].get(), static_cast<int>(i), kMiB);  // every block is writable
  }
  // Carved in order: the second starts right after the first (rounded to 64), or at the
  // 2 MiB-aligned start of a new slab when the first filled one left by an earlier test.
  const auto* first = static_cast<char*>(blocks[0].get());
  const auto* second = static_cast<char*>(blocks[1].get());
  CHECK((second == first + 3 * kMiB / 2 || reinterpret_cast<uintptr_t>(second) % (2 * kMiB) == 0));
  for (size_t i = 0; i < blocks.size(); ++i)
    CHECK(static_cast<unsigned char*>(blocks[i].get())[kMiB - 1] == i);
  // Smaller and larger blocks come from the default allocator, aligned all the same.
  const auto small = math::AllocateWeightStorage(4096),
             large = math::AllocateWeightStorage(40 * kMiB);
  CHECK(reinterpret_cast<uintptr_t>(small.get()) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(large.get()) % 64 == 0);
  // A block outlives the others of its slab.
  const std::shared_ptr<void> last = blocks.back();
  blocks.clear();
  std::memset(last.get(), 1, kMiB);
}
