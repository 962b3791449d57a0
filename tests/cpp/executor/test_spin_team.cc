// SpinTeamScope (executor/parallel.h): while it lives on an inline run's thread, ParallelFor
// calls go to a team of spinning helpers. Every call still covers its range exactly once,
// whichever threads take its pieces; errors reach the caller; nested calls run on their own
// thread; with one thread or no spin the scope changes nothing.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <atomic>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "executor/parallel.h"

using namespace onnx_light::core::runtime;

namespace {

// Fixes SpinContendedRecently() for one test: a loaded machine must not turn a team off.
struct ContentionForTest {
  explicit ContentionForTest(SpinContention mode) { SetSpinContentionForTesting(mode); }
  ~ContentionForTest() { SetSpinContentionForTesting(SpinContention::kDetect); }
};

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

// The owner starts the next call as soon as the last piece of one is done, while a helper may
// still be reading the finished call's parameters: it must not claim a piece with a mix of
// the two calls' parameters (the soak's cancel race crashed on that once in ~100,000 runs).
TEST_CASE("back-to-back short spin team calls run each piece once, with its own call") {
  const ContentionForTest ignore(SpinContention::kIgnore);
  tbb::task_arena arena(2);
  arena.execute([] {
    SpinTeamScope team(std::chrono::microseconds(1000));
    for (int64_t call = 0; call < 100000; ++call) {
      const int64_t n = 2 + call % 3;
      std::vector<std::atomic<int64_t>> seen(static_cast<size_t>(n));
      ParallelFor(n, 1, [&seen, n, call](int64_t b, int64_t e) {
        REQUIRE(e <= n);
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(call + 1);
      });
      for (int64_t i = 0; i < n; ++i) REQUIRE(seen[static_cast<size_t>(i)].load() == call + 1);
    }
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
    const ContentionForTest ignore(SpinContention::kIgnore);
    SpinTeamScope team(std::chrono::microseconds(1000));
    REQUIRE(team.spinning());
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

TEST_CASE(
    "after a helper found its core wanted elsewhere, scopes do not spin and calls still cover") {
  tbb::task_arena arena(2);
  arena.execute([] {
    {
      const ContentionForTest contended(SpinContention::kForceContended);
      CHECK(SpinContendedRecently());
      SpinTeamScope team(std::chrono::microseconds(1000));
      CHECK_FALSE(team.spinning());
      CheckCoversOnce(1000, 10);
    }
    const ContentionForTest ignore(SpinContention::kIgnore);
    CHECK_FALSE(SpinContendedRecently());
    SpinTeamScope team(std::chrono::microseconds(1000));
    CHECK(team.spinning());
    CheckCoversOnce(1000, 10);
    // A sign that comes while the team lives: its helpers are not recruited again, and calls
    // made with no helper left go to the arena's workers.
    SetSpinContentionForTesting(SpinContention::kForceContended);
    for (int round = 0; round < 50; ++round) CheckCoversOnce(1000, 10);
  });
}

#if defined(__linux__)
namespace {

// Pins every thread of this process to `cpus` (new threads inherit the caller's mask).
void PinProcess(const cpu_set_t& cpus) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    sched_setaffinity(std::stoi(task.path().filename().string()), sizeof(cpus), &cpus);
}

}  // namespace

TEST_CASE("a helper that shares its core with other work notices and stops the spinning") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  tbb::task_arena arena(2);
  arena.execute([] { CheckCoversOnce(1000, 10); });  // the arena's worker exists before pinning
  PinProcess(one);
  std::atomic<bool> stop{false};
  std::thread other_work([&] {
    while (!stop.load()) {
    }
  });
  // On one core the helper, the caller and other_work take turns: the OS must switch the
  // spinning helper out, and the helper must say so. Bounded: the scheduler switches
  // runnable threads on one core every few milliseconds.
  bool noticed = false;
  arena.execute([&] {
    for (int scope = 0; scope < 2000 && !noticed; ++scope) {
      SpinTeamScope team(std::chrono::microseconds(100000));
      for (int call = 0; call < 20; ++call) CheckCoversOnce(64, 1);
      noticed = SpinContendedRecently();
    }
  });
  stop = true;
  other_work.join();
  PinProcess(all);
  CHECK(noticed);
}
#endif
