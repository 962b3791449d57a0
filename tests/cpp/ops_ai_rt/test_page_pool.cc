// ops/ai_rt/page_pool.h: the huge-page slabs dense page payloads of the process heap come
// from. Blocks are carved consecutively from 2 MiB-aligned slabs, reused after their last
// owner dies, charged to the run's budget; sizes outside the pool's are refused (null), and
// EncodePage takes its payloads from the pool only for the process heap.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "ops/ai_rt/page_pool.h"
#include "ops/ai_rt/page_writer.h"

using namespace onnx_light;
using core::runtime::DefaultAllocator;
using ops::ai_rt::PagePool;

namespace {

uintptr_t Address(const std::shared_ptr<void>& p) { return reinterpret_cast<uintptr_t>(p.get()); }

}  // namespace

TEST_CASE("the page pool carves consecutive blocks from 2 MiB slabs and reuses freed ones") {
  PagePool pool;
  CHECK(pool.Allocate(PagePool::kMinBytes - 1) == nullptr);
  CHECK(pool.Allocate(PagePool::kMaxBytes + 1) == nullptr);
  auto a = pool.Allocate(64 << 10);
  auto b = pool.Allocate((64 << 10) - 100);  // the same 4 KiB-rounded class
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(Address(a) % PagePool::kSlabBytes == 0);
  CHECK(Address(b) == Address(a) + (64 << 10));
  std::memset(a.get(), 1, 64 << 10);  // the whole block is writable
  CHECK(pool.slab_bytes() == PagePool::kSlabBytes);
  void* first = a.get();
  a.reset();
  CHECK(pool.free_bytes() == (64 << 10));
  auto c = pool.Allocate((64 << 10) - 4000);
  CHECK(c.get() == first);  // a dead block goes to the next request of its size
  CHECK(pool.free_bytes() == 0);
  // 32 blocks of 64 KiB fill a slab; the 33rd starts another.
  std::vector<std::shared_ptr<void>> more;
  for (int i = 0; i < 31; ++i) more.push_back(pool.Allocate(64 << 10));
  CHECK(pool.slab_bytes() == 2 * PagePool::kSlabBytes);
  for (const auto& p : more) CHECK(p.get() != c.get());
}

TEST_CASE("the page pool keeps free slabs up to its limit and gives back the rest") {
  // Three slabs of 64 KiB blocks, all freed: a pool keeping 2 MiB free returns the wholly
  // free slabs beyond that (not the one it carves from); the default keeps them all.
  auto fill_and_free = [](PagePool& pool) {
    std::vector<std::shared_ptr<void>> blocks;
    for (int i = 0; i < 96; ++i) blocks.push_back(pool.Allocate(64 << 10));
    CHECK(pool.slab_bytes() == 3 * PagePool::kSlabBytes);
    blocks.clear();
  };
  PagePool small(PagePool::kSlabBytes);
  fill_and_free(small);
  CHECK(small.slab_bytes() < 3 * PagePool::kSlabBytes);
  CHECK(small.free_bytes() <= small.slab_bytes());
  PagePool kept;
  CHECK(PagePool::DefaultMaxFreeBytes() >= (size_t{64} << 20));
  fill_and_free(kept);
  CHECK(kept.slab_bytes() == 3 * PagePool::kSlabBytes);
  CHECK(kept.free_bytes() == 3 * PagePool::kSlabBytes);
  // Blocks of 4 KiB (a 16-row page of one KV head of 64 FLOAT) come from the pool too.
  auto page = kept.Allocate(16 * 64 * 4);
  REQUIRE(page != nullptr);
  CHECK(kept.free_bytes() == 3 * PagePool::kSlabBytes);  // a new class: its own slab
}

TEST_CASE("page pool blocks are charged to the run's budget and refunded") {
  PagePool pool;
  auto budget = std::make_shared<core::runtime::RunBudget>(100 << 10);
  core::runtime::ScopedRunBudget scope(budget.get());
  auto a = pool.Allocate(64 << 10);
  CHECK(budget->live_bytes() == (64 << 10));
  CHECK_THROWS_AS(pool.Allocate(64 << 10), core::Error);
  a.reset();
  CHECK(budget->live_bytes() == 0);
}

TEST_CASE("dense pages of the process heap come from the pool, others from their allocator") {
  const std::vector<float> rows(8 * 16 * 128, 0.5f);
  const ops::ai_rt::RowSource src{rows.data(), 8 * 16 * 128, 16 * 128};
  const ops::ai_rt::PageFormat dense{core::DataType::kFloat, 1.0f, 0};
  size_t written = 0;
  const size_t before = PagePool::Instance().slab_bytes() - PagePool::Instance().free_bytes();
  auto page = ops::ai_rt::EncodePage(dense, src, 1, 8, 16, 128, 16, DefaultAllocator(), &written);
  CHECK(written == 64u << 10);
  CHECK(PagePool::Instance().slab_bytes() - PagePool::Instance().free_bytes() >= before);
  CHECK(ops::ai_rt::WritablePageFormat(page) != nullptr);  // still the page writers' own
  CHECK(page.tensor().data<float>()[8 * 16 * 128 - 1] == 0.5f);
  core::runtime::HeapAllocator heap;
  auto other = ops::ai_rt::EncodePage(dense, src, 1, 8, 16, 128, 16, heap, &written);
  CHECK(heap.live_bytes() == core::runtime::HeapAllocator::RoundedSize(64 << 10));
  CHECK(ops::ai_rt::WritablePageFormat(other) != nullptr);
}
