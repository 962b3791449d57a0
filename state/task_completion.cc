#include "state/task_completion.h"

#include <utility>

#include "core/error.h"

namespace onnx_light::core::runtime {

void TaskCompletion::Cancel(std::string reason) {
  // The reason is stored before the state flips so that a reader who sees kCancelled also
  // sees its reason (both under the same lock).
  std::lock_guard<std::mutex> lock(reason_mutex_);
  State expected = State::kPending;
  if (state_.compare_exchange_strong(expected, State::kCancelled, std::memory_order_acq_rel)) {
    reason_ = std::move(reason);
    cancel_flag_.store(true, std::memory_order_release);
    return;
  }
  if (expected == State::kCompleted)
    Throw(ErrorCode::kFailedPrecondition,
          "TaskCompletion: cannot cancel a completed task (its results were already published)");
  // Already cancelled: idempotent, the first reason stays.
}

bool TaskCompletion::TryBeginPublication() {
  State expected = State::kPending;
  return state_.compare_exchange_strong(expected, State::kCompleted, std::memory_order_acq_rel);
}

void TaskCompletion::Attach() {
  if (cancelled()) Throw(ErrorCode::kCancelled, "call cancelled before it started: " + reason());
  bool expected = false;
  OL_CHECK(attached_.compare_exchange_strong(expected, true, std::memory_order_acq_rel),
           ErrorCode::kFailedPrecondition,
           "TaskCompletion is single-use: it was already passed to another call");
  // A cancel that raced with the attach is observed by the executor through cancel_flag().
}

std::string TaskCompletion::reason() const {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return reason_;
}

const char* TaskCompletionStateName(TaskCompletion::State state) {
  switch (state) {
    case TaskCompletion::State::kPending:
      return "pending";
    case TaskCompletion::State::kCancelled:
      return "cancelled";
    case TaskCompletion::State::kCompleted:
      return "completed";
  }
  return "?";
}

}  // namespace onnx_light::core::runtime
