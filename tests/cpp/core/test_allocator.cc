#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/io_arena.h"
#include "core/tensor.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

TEST_CASE("the heap allocator counts live and peak bytes in 64-byte units") {
  HeapAllocator heap;
  {
    auto a = heap.Allocate(1);
    auto b = heap.Allocate(100);
    CHECK(reinterpret_cast<uintptr_t>(a.get()) % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(b.get()) % 64 == 0);
    CHECK(heap.live_bytes() == 64 + 128);
    Allocator& base = heap;
    CHECK(base.live_bytes() == 192);
  }
  CHECK(heap.live_bytes() == 0);
  CHECK(heap.peak_bytes() == 192);
}

TEST_CASE(
    "the heap allocator reuses a dead large block of the same rounded size, never a live one") {
  HeapAllocator heap(size_t{8} << 20);
  const size_t big = 3 * HeapAllocator::kLargeBlockBytes + 100;
  CHECK(HeapAllocator::RoundedSize(big) == (size_t{13} << 18));  // 3.25 MiB: 1/8 of 2 MiB steps
  CHECK(HeapAllocator::RoundedSize(100) == 128);
  void* first = nullptr;
  {
    auto a = heap.Allocate(big);
    first = a.get();
    auto live = heap.Allocate(big);  // a is live: never handed out twice
    CHECK(live.get() != first);
  }
  CHECK(heap.cached_bytes() == 2 * HeapAllocator::RoundedSize(big));
  CHECK(heap.live_bytes() == 0);
  auto again = heap.Allocate(big + 1000);  // same rounded size: a cached block, no new mapping
  CHECK(heap.large_reuses() == 1);
  CHECK(heap.cached_bytes() == HeapAllocator::RoundedSize(big));
  CHECK(reinterpret_cast<uintptr_t>(again.get()) % 64 == 0);
  {
    auto huge = heap.Allocate(size_t{9} << 20);  // dies with no room in the cache: freed
  }
  CHECK(heap.cached_bytes() == HeapAllocator::RoundedSize(big));
  auto small = heap.Allocate(1000);  // a dead small block waits on its own class list
  small.reset();
  CHECK(heap.cached_bytes() == HeapAllocator::RoundedSize(big) + 1024);
  CHECK(heap.large_reuses() == 1);
}

#if defined(__linux__)
// The VmFlags of the mapping that holds `p`, from /proc/self/smaps ("" when not found).
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &begin, &end) == 2 && line.find(' ') < 40) {
      inside = at >= begin && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST_CASE("the heap allocator asks for huge pages for blocks of 2 MiB and more, not below") {
  HeapAllocator heap;
  auto big = heap.Allocate(size_t{16} << 20);
  // The middle of the block lies in the advised range ("hg": MADV_HUGEPAGE).
  const std::string flags = VmFlagsOf(static_cast<char*>(big.get()) + (size_t{8} << 20));
  CAPTURE(flags);
  CHECK(flags.find(" hg") != std::string::npos);
  auto small = heap.Allocate(size_t{64} << 10);
  CHECK(VmFlagsOf(small.get()).find(" hg") == std::string::npos);
}
#endif

TEST_CASE("the heap allocator hands a dead small block to the next request of its class") {
  HeapAllocator heap;
  auto a = heap.Allocate(100);
  void* first = a.get();
  auto live = heap.Allocate(100);
  CHECK(live.get() != first);  // a live block is never handed out twice
  a.reset();
  CHECK(heap.cached_bytes() == 128);
  auto b = heap.Allocate(120);  // same 128-byte class
  CHECK(b.get() == first);
  CHECK(heap.cached_bytes() == 0);
  CHECK(heap.live_bytes() == 256);
  b.reset();
  auto other = heap.Allocate(64);  // another class: a fresh block
  CHECK(other.get() != first);
  // Above 512 bytes a class spans 1/8 of a power of two: 1200 and 1250 bytes share the
  // 1280-byte class, while live_bytes still counts each request's 64-byte rounding.
  auto c = heap.Allocate(1200);
  CHECK(heap.live_bytes() == 128 + 64 + 1216);
  void* c_ptr = c.get();
  c.reset();
  CHECK(heap.cached_bytes() == 128 + 1280);
  auto d = heap.Allocate(1250);
  CHECK(d.get() == c_ptr);
  CHECK(heap.live_bytes() == 128 + 64 + 1280);
  d.reset();
  other.reset();
  live.reset();
  CHECK(heap.live_bytes() == 0);
  CHECK(heap.peak_bytes() == 128 + 64 + 1280);
  CHECK(heap.cached_bytes() == 2 * 128 + 64 + 1280);  // b and live share a class
}

TEST_CASE("the heap allocator caches at most an eighth of its budget in small blocks") {
  HeapAllocator heap(size_t{1} << 20);  // 128 KiB for small blocks
  const size_t block = size_t{64} << 10;
  std::vector<std::shared_ptr<void>> owners;
  std::set<void*> first_round;
  for (int i = 0; i < 4; ++i) {
    owners.push_back(heap.Allocate(block));
    first_round.insert(owners.back().get());
  }
  CHECK(heap.live_bytes() == 4 * block);
  owners.clear();  // two fit the bound, two go back to the C heap
  CHECK(heap.cached_bytes() == 2 * block);
  CHECK(heap.live_bytes() == 0);
  CHECK(heap.peak_bytes() == 4 * block);
  auto x = heap.Allocate(block);
  auto y = heap.Allocate(block);
  CHECK(x.get() != y.get());
  CHECK(first_round.count(x.get()) == 1);
  CHECK(first_round.count(y.get()) == 1);
  CHECK(heap.cached_bytes() == 0);
  auto z = heap.Allocate(block);  // the lists are empty: a fresh block
  CHECK(z.get() != x.get());
  CHECK(z.get() != y.get());
  CHECK(heap.live_bytes() == 3 * block);
}

TEST_CASE("the heap allocator's small cache is correct under concurrent allocate and free") {
  HeapAllocator heap(size_t{4} << 20);  // 512 KiB of small blocks: the bound is hit
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  constexpr size_t kKept = 8;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&heap, &corrupted, t] {
      std::mt19937 rng(static_cast<uint32_t>(t) + 1);
      std::vector<std::pair<std::shared_ptr<void>, size_t>> kept(kKept);
      for (int i = 0; i < kRounds; ++i) {
        const size_t slot = rng() % kKept;
        auto& [owner, bytes] = kept[slot];
        if (owner) {  // the block still holds the pattern this thread wrote: not shared
          const auto* b = static_cast<const unsigned char*>(owner.get());
          const unsigned char tag = static_cast<unsigned char>(t * 64 + slot);
          for (size_t k = 0; k < bytes; ++k)
            if (b[k] != tag) {
              corrupted.fetch_add(1);
              break;
            }
        }
        bytes = size_t{1} + rng() % 20000;
        owner = heap.Allocate(bytes);
        if (reinterpret_cast<uintptr_t>(owner.get()) % 64 != 0) corrupted.fetch_add(1);
        std::memset(owner.get(), t * 64 + static_cast<int>(slot), bytes);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(corrupted.load() == 0);
  CHECK(heap.live_bytes() == 0);
  CHECK(heap.peak_bytes() <= kThreads * kKept * HeapAllocator::RoundedSize(20000));
  CHECK(heap.cached_bytes() <= (size_t{512} << 10));
  CHECK(heap.cached_bytes() > 0);
}

TEST_CASE("IoArena size classes are powers of two of at least 64 bytes") {
  CHECK(IoArena::SizeClass(0) == 64);
  CHECK(IoArena::SizeClass(1) == 64);
  CHECK(IoArena::SizeClass(64) == 64);
  CHECK(IoArena::SizeClass(65) == 128);
  CHECK(IoArena::SizeClass(1000) == 1024);
  CHECK(IoArena::SizeClass(4096) == 4096);
  CHECK(IoArena::SizeClass(4097) == 8192);
  CHECK_THROWS_AS(IoArena::SizeClass(SIZE_MAX), std::bad_alloc);
}

TEST_CASE("IoArena reuses a released block of the same class and counts it") {
  IoArena arena;
  void* first;
  {
    auto a = arena.Allocate(1000);
    first = a.get();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    std::memset(a.get(), 0xab, 1000);
    CHECK(arena.live_bytes() == 1024);
  }
  IoArena::Stats s = arena.stats();
  CHECK(s.live_bytes == 0);
  CHECK(s.cached_bytes == 1024);
  CHECK(s.allocations == 1);
  CHECK(s.system_allocations == 1);
  auto b = arena.Allocate(600);  // same 1024-byte class
  CHECK(b.get() == first);
  auto c = arena.Allocate(100);  // another class: a fresh block
  CHECK(c.get() != first);
  s = arena.stats();
  CHECK(s.allocations == 3);
  CHECK(s.reuses == 1);
  CHECK(s.system_allocations == 2);
  CHECK(s.requested_bytes == 1000 + 600 + 100);
  CHECK(s.live_bytes == 1024 + 128);
  CHECK(s.peak_bytes == 1024 + 128);
  CHECK(s.cached_bytes == 0);
}

TEST_CASE("IoArena never recycles an allocation while any owner lives") {
  IoArena arena;
  auto a = arena.Allocate(256);
  void* p = a.get();
  std::shared_ptr<void> retained = a;  // e.g. a tensor retained as persistent state
  a.reset();
  auto b = arena.Allocate(256);
  CHECK(b.get() != p);
  CHECK(arena.stats().reuses == 0);
  CHECK(arena.live_bytes() == 512);
  retained.reset();  // the last owner: now the block may be reused
  auto c = arena.Allocate(256);
  CHECK(c.get() == p);
  CHECK(arena.stats().reuses == 1);
}

TEST_CASE("a retained tensor from an IoArena keeps its bytes while new tensors are made") {
  IoArena arena;
  Tensor t("present", DataType::kFloat, {4}, arena);
  float* data = t.mutable_data<float>();
  for (int i = 0; i < 4; ++i) data[i] = static_cast<float>(i);
  Tensor retained = std::move(t).RetainStorage();
  Tensor view = retained.BorrowView();
  retained = Tensor();
  for (int round = 0; round < 8; ++round) {
    Tensor other("tmp", DataType::kFloat, {4}, arena);
    CHECK(other.raw_data() != view.raw_data());
    std::memset(other.mutable_raw_data(), 0xff, other.nbytes());
  }
  CHECK(view.ToFloatVector() == std::vector<float>{0, 1, 2, 3});
  CHECK(arena.stats().system_allocations == 2);  // the retained block and one reused block
  CHECK(arena.stats().reuses == 7);
}

TEST_CASE("IoArena allocations outlive the arena object") {
  std::shared_ptr<void> survivor;
  {
    IoArena arena;
    survivor = arena.Allocate(128);
    auto cached = arena.Allocate(64);
  }
  std::memset(survivor.get(), 1, 128);  // still valid memory (ASan checks this)
  survivor.reset();                     // returns to the orphaned pool, which then frees it
}

TEST_CASE("IoArena caches at most max_cached_bytes and Trim empties the free lists") {
  IoArena arena(/*max_cached_bytes=*/192);
  {
    auto a = arena.Allocate(128);
    auto b = arena.Allocate(128);
    auto c = arena.Allocate(64);
  }
  // Release order c, b, a: 64 + 128 fit the cap, the last 128 goes back to the heap.
  CHECK(arena.stats().cached_bytes == 192);
  arena.Trim();
  CHECK(arena.stats().cached_bytes == 0);
  auto d = arena.Allocate(128);
  CHECK(arena.stats().reuses == 0);
  CHECK(arena.stats().system_allocations == 4);
}

TEST_CASE("IoArena survives 4 threads x 10000 allocations without handing out a live block") {
  IoArena arena;
  constexpr int kThreads = 4;
  constexpr int kIterations = 10000;
  constexpr size_t kRing = 8;                     // blocks each thread keeps alive at once
  const size_t kSizes[] = {40, 100, 1000, 3000};  // classes 64, 128, 1024, 4096
  std::vector<int> corrupted(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      struct Held {
        std::shared_ptr<void> block;
        size_t bytes = 0;
        unsigned char tag = 0;
      };
      std::vector<Held> ring(kRing);
      for (int i = 0; i < kIterations; ++i) {
        Held& slot = ring[static_cast<size_t>(i) % kRing];
        if (slot.block) {
          // Every byte still carries this holder's tag: nobody else got the block meanwhile.
          const auto* bytes = static_cast<const unsigned char*>(slot.block.get());
          for (size_t k = 0; k < slot.bytes; ++k) {
            corrupted[static_cast<size_t>(t)] += bytes[k] != slot.tag ? 1 : 0;
          }
          slot.block.reset();
        }
        slot.bytes = kSizes[rng() % 4];
        slot.tag = static_cast<unsigned char>(t * 64 + i % 64);
        slot.block = arena.Allocate(slot.bytes);
        std::memset(slot.block.get(), slot.tag, slot.bytes);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(corrupted[static_cast<size_t>(t)] == 0);

  const IoArena::Stats s = arena.stats();
  CHECK(s.allocations == kThreads * kIterations);
  CHECK(s.reuses + s.system_allocations == s.allocations);
  // Blocks are never freed (no cap), so each class needs at most as many heap blocks as
  // were ever alive at once: kThreads * kRing per class, 4 classes.
  CHECK(s.system_allocations <= kThreads * kRing * 4);
  CHECK(s.live_bytes == 0);
  CHECK(s.peak_bytes <= kThreads * kRing * 4096);
  CHECK(s.peak_bytes >= kRing * 64);
  CHECK(s.cached_bytes > 0);
}

// --- a run's memory limit (RunBudget) --------------------------------------------------

TEST_CASE("a run budget charges the requested bytes of live allocations and refunds them") {
  auto budget = std::make_shared<RunBudget>(1000);
  HeapAllocator heap;
  IoArena arena;
  std::shared_ptr<void> a, b;
  {
    ScopedRunBudget scope(budget.get());
    a = heap.Allocate(600);
    b = arena.Allocate(300);
    CHECK(budget->live_bytes() == 900);
    try {
      heap.Allocate(101);
      FAIL("expected the budget to refuse");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kResourceExhausted);
      CHECK(std::string(e.what()) ==
            "allocating 101 bytes would bring this run's live allocations from 900 bytes to "
            "more than max_run_bytes = 1000");
    }
    CHECK_THROWS_AS(arena.Allocate(101), Error);
    CHECK(budget->live_bytes() == 900);  // a refusal charges nothing
    auto exact = heap.Allocate(100);     // exactly the limit passes
    CHECK(budget->live_bytes() == 1000);
  }
  CHECK(budget->live_bytes() == 900);
  CHECK(budget->peak_bytes() == 1000);
  auto outside = heap.Allocate(5000);  // no budget in force: not charged
  CHECK(budget->live_bytes() == 900);
  // Owners that outlive the run (and the budget's other holders) still refund it.
  std::weak_ptr<RunBudget> weak = budget;
  budget.reset();
  CHECK_FALSE(weak.expired());
  a.reset();
  CHECK(weak.lock()->live_bytes() == 300);
  b.reset();
  CHECK(weak.expired());
}

TEST_CASE(
    "a run budget scope nests and restores the previous budget, and a null budget means none") {
  auto outer = std::make_shared<RunBudget>(1 << 20);
  HeapAllocator heap;
  ScopedRunBudget scope(outer.get());
  {
    ScopedRunBudget none(nullptr);
    auto p = heap.Allocate(64);
    CHECK(outer->live_bytes() == 0);
  }
  auto p = heap.Allocate(64);
  CHECK(outer->live_bytes() == 64);
  // Another thread has its own (no) budget.
  std::thread([&] { auto q = heap.Allocate(128); }).join();
  CHECK(outer->live_bytes() == 64);
}

TEST_CASE("a run budget refuses a request larger than the limit without wrapping around") {
  auto budget = std::make_shared<RunBudget>(64);
  ScopedRunBudget scope(budget.get());
  CHECK_THROWS_AS(DefaultAllocator().Allocate(size_t{1} << 40), Error);
  CHECK(budget->live_bytes() == 0);
}
