#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/error.h"
#include "state/task_completion.h"

using namespace onnx_light::core;
using namespace onnx_light::core::runtime;

TEST_CASE("A new task completion is pending and not cancelled") {
  TaskCompletion c;
  CHECK(c.state() == TaskCompletion::State::kPending);
  CHECK_FALSE(c.cancelled());
  CHECK_FALSE(c.done());
  CHECK_FALSE(c.cancel_flag().load());
}

TEST_CASE("Cancel records the first reason, sets the flag and makes publication lose") {
  TaskCompletion c;
  c.Cancel("request no longer needed");
  c.Cancel("second reason is ignored");
  CHECK(c.cancelled());
  CHECK(c.done());
  CHECK(c.cancel_flag().load());
  CHECK(c.reason() == "request no longer needed");
  CHECK_FALSE(c.TryBeginPublication());
  CHECK(c.state() == TaskCompletion::State::kCancelled);
}

TEST_CASE("Publication completes the token and a later cancel is an error") {
  TaskCompletion c;
  CHECK(c.TryBeginPublication());
  CHECK(c.state() == TaskCompletion::State::kCompleted);
  CHECK(c.done());
  try {
    c.Cancel("too late");
    FAIL("cancel after completion must throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kFailedPrecondition);
    CHECK(std::string(e.what()).find("completed") != std::string::npos);
  }
  CHECK_FALSE(c.TryBeginPublication());  // single use: a second publication cannot win
}

TEST_CASE("Attach rejects a cancelled token and a token already used by another call") {
  TaskCompletion cancelled;
  cancelled.Cancel("stop");
  try {
    cancelled.Attach();
    FAIL("attach of a cancelled token must throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCancelled);
    CHECK(std::string(e.what()).find("stop") != std::string::npos);
  }
  TaskCompletion used;
  used.Attach();
  CHECK(used.attached());
  try {
    used.Attach();
    FAIL("second attach must throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kFailedPrecondition);
    CHECK(std::string(e.what()).find("single-use") != std::string::npos);
  }
}

TEST_CASE("Exactly one of a concurrent cancel and publication wins, every time") {
  constexpr int kRounds = 5000;
  int published = 0, cancelled = 0;
  for (int round = 0; round < kRounds; ++round) {
    TaskCompletion c;
    std::atomic<bool> go{false};
    bool cancel_threw = false;
    std::thread canceller([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      try {
        c.Cancel("race");
      } catch (const Error& e) {
        cancel_threw = e.code() == ErrorCode::kFailedPrecondition;
      }
    });
    go.store(true, std::memory_order_release);
    const bool won = c.TryBeginPublication();
    canceller.join();
    // Publication won <=> the cancel raised; otherwise the token is cancelled.
    REQUIRE(won == cancel_threw);
    REQUIRE(c.state() ==
            (won ? TaskCompletion::State::kCompleted : TaskCompletion::State::kCancelled));
    REQUIRE(c.cancel_flag().load() == !won);
    (won ? published : cancelled)++;
  }
  CHECK(published + cancelled == kRounds);
}
