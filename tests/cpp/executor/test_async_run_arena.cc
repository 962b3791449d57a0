// AsyncRunArena (executor/async_run.h): a run it carries executes on a TBB worker and enters
// its session's arena from there; that arena's parallel work must still find a second thread
// on a machine whose every core TBB would otherwise give one worker but one (issue 15: the
// batched scheduler's steps ran on one core of two).
#include <doctest/doctest.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "executor/async_run.h"

using namespace onnx_light::core::runtime;

TEST_CASE("a run carried by AsyncRunArena gets a helper in a two-thread arena") {
  tbb::task_arena session_arena(2);
  std::promise<size_t> threads_seen;
  AsyncRunArena().enqueue([&] {
    std::mutex mutex;
    std::set<std::thread::id> ids;
    std::atomic<int> arrived{0};
    session_arena.execute([&] {
      // Two pieces that each wait (up to 10 s) until a second thread has taken one.
      tbb::parallel_for(0, 2, 1, [&](int) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          ids.insert(std::this_thread::get_id());
        }
        arrived.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < until) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            if (ids.size() >= 2) return;
          }
          if (arrived.load() >= 2) return;  // one thread took both: no helper came
          std::this_thread::yield();
        }
      });
    });
    threads_seen.set_value(ids.size());
  });
  CHECK(threads_seen.get_future().get() == 2);
}
