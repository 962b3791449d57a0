// SpinTeamScope (executor/parallel.h): while it lives on an inline run's thread, ParallelFor
// calls go to a team of spinning helpers. Every call still covers its range exactly once,
// whichever threads take its pieces; errors reach the caller; nested calls run on their own
// thread; with one thread or no spin the scope changes nothing.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "executor/parallel.h"

using namespace onnx_light::core::runtime;

namespace {

// Runs ParallelFor(n, grain) and checks that every index was visited exactly once.
void CheckCoversOnce(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    REQUIRE(0 <= b);
    REQUIRE(b < e);
    REQUIRE(e <= n);
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) REQUIRE(seen[static_cast<size_t>(i)].load() == 1);
}

}  // namespace

TEST_CASE("a spin team covers every range exactly once, call after call") {
  tbb::task_arena arena(2);
  arena.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1000));
    for (int round = 0; round < 200; ++round)
      for (const auto& [n, grain] :
           {std::pair<int64_t, int64_t>{2, 1}, {4, 1}, {7, 2}, {1000, 16}, {100003, 1024}, {3, 8}})
        CheckCoversOnce(n, grain);
  });
}

TEST_CASE("a spin team gives the caller the first error of a call and runs the next call") {
  tbb::task_arena arena(2);
  arena.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1000));
    for (int round = 0; round < 50; ++round) {
      CHECK_THROWS_WITH_AS(ParallelFor(64, 1,
                                       [](int64_t b, int64_t) {
                                         if (b == 0) throw std::runtime_error("piece 0 failed");
                                       }),
                           "piece 0 failed", std::runtime_error);
      CheckCoversOnce(64, 1);
    }
  });
}

TEST_CASE("a ParallelFor inside a team call runs whole on the thread of the piece") {
  tbb::task_arena arena(2);
  arena.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1000));
    std::atomic<int64_t> inner_total{0};
    ParallelFor(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto caller = std::this_thread::get_id();
        ParallelFor(100, 1, [&](int64_t ib, int64_t ie) {
          CHECK(std::this_thread::get_id() == caller);
          inner_total.fetch_add(ie - ib);
        });
      }
    });
    CHECK(inner_total.load() == 800);
  });
}

TEST_CASE("a spin team outlives idle gaps longer than its spin, and scopes nest") {
  tbb::task_arena arena(2);
  arena.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1));  // helpers leave between calls
    for (int round = 0; round < 20; ++round) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
      CheckCoversOnce(1000, 10);
      SpinTeamScope inner(std::chrono::microseconds(1000));  // a subgraph's run
      CheckCoversOnce(1000, 10);
    }
  });
}

TEST_CASE("with one thread or no spin, a spin team scope changes nothing") {
  tbb::task_arena one(1);
  one.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1000));
    CheckCoversOnce(1000, 10);
  });
  tbb::task_arena two(2);
  two.execute([] {
    SpinTeamScope team(std::chrono::microseconds(0));
    CheckCoversOnce(1000, 10);
  });
}
