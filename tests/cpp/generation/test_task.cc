#include <doctest/doctest.h>

#include <stdexcept>
#include <thread>

#include "executor/task.h"

using namespace onnx_light::core::runtime;

namespace {
Task<int> Leaf(int x) { co_return x * 2; }
Task<int> Chain(int depth) {
  int sum = 0;
  for (int i = 0; i < depth; ++i) sum += co_await Leaf(1);
  co_return sum;
}
Task<int> Throws() {
  throw std::runtime_error("boom");
  co_return 0;
}
Task<void> Catches(bool& caught) {
  try {
    co_await Throws();
  } catch (const std::runtime_error& e) {
    caught = std::string(e.what()) == "boom";
  }
}
bool started = false;
Task<int> Lazy() {
  started = true;
  co_return 1;
}
// Resumes on another thread, as an async run completing on a worker would.
struct ResumeOnThread {
  bool await_ready() { return false; }
  void await_suspend(std::coroutine_handle<> h) { std::thread([h] { h.resume(); }).detach(); }
  std::thread::id await_resume() { return std::this_thread::get_id(); }
};
Task<std::thread::id> Hop() { co_return co_await ResumeOnThread{}; }
}  // namespace

TEST_CASE("a Task starts only when awaited, and returns its value") {
  started = false;
  Task<int> t = Lazy();
  CHECK_FALSE(started);
  CHECK(SyncWait(std::move(t)) == 1);
  CHECK(started);
}

TEST_CASE("a long chain of synchronously completing awaits does not grow the stack") {
  CHECK(SyncWait(Chain(1000000)) == 2000000);
}

TEST_CASE("exceptions propagate to the awaiting coroutine and to SyncWait") {
  bool caught = false;
  SyncWait(Catches(caught));
  CHECK(caught);
  CHECK_THROWS_WITH(SyncWait(Throws()), "boom");
}

TEST_CASE("SyncWait waits for a task that resumes on another thread") {
  CHECK(SyncWait(Hop()) != std::this_thread::get_id());
}
