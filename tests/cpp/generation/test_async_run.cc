#include <doctest/doctest.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "executor/async_run.h"

using namespace onnx_light::core::runtime;

namespace {
asio::awaitable<int> AwaitTwice(std::thread::id& resumed_on) {
  int a = co_await AsyncRunOnArena<int>([] { return 20; }, nullptr, asio::use_awaitable);
  int b = co_await AsyncRunOnArena<int>([] { return 22; }, nullptr, asio::use_awaitable);
  resumed_on = std::this_thread::get_id();
  co_return a + b;
}
}  // namespace

TEST_CASE("co_await AsyncRunOnArena resumes on the io_context thread with the result") {
  asio::io_context io;
  std::thread::id resumed_on;
  int result = 0;
  asio::co_spawn(io, AwaitTwice(resumed_on), [&](std::exception_ptr e, int r) {
    CHECK_FALSE(e);
    result = r;
  });
  io.run();
  CHECK(result == 42);
  CHECK(resumed_on == std::this_thread::get_id());
}

TEST_CASE("a callback bound to an io_context keeps run() alive until the work completes") {
  asio::io_context io;
  bool called = false;
  std::thread::id called_on;
  AsyncRunOnArena<int>(
      [] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return 1;
      },
      nullptr, asio::bind_executor(io, [&](std::exception_ptr e, int r) {
        called = !e && r == 1;
        called_on = std::this_thread::get_id();
      }));
  io.run();  // returns only after the handler ran: the pending work is tracked
  CHECK(called);
  CHECK(called_on == std::this_thread::get_id());
}

TEST_CASE("errors reach the caller as exceptions through a future") {
  auto future = AsyncRunOnArena<int>([]() -> int { throw std::runtime_error("kernel failed"); },
                                     nullptr, asio::use_future);
  CHECK_THROWS_WITH(future.get(), "kernel failed");
}

TEST_CASE("a cancellation signal reaches the run's cancel hook") {
  asio::io_context io;
  asio::cancellation_signal signal;
  std::atomic<bool> cancelled{false};
  std::atomic<bool> release{false};
  int result = 0;
  AsyncRunOnArena<int>(
      [&] {
        while (!release.load()) std::this_thread::yield();
        return cancelled.load() ? -1 : 1;
      },
      [&] {
        cancelled = true;
        release = true;
      },
      asio::bind_cancellation_slot(
          signal.slot(), asio::bind_executor(io, [&](std::exception_ptr, int r) { result = r; })));
  signal.emit(asio::cancellation_type::terminal);
  io.run();
  CHECK(result == -1);
}
