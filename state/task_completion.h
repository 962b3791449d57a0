// TaskCompletion: the single-use cancellation token of one state call (spec "Lifecycle and
// validation"). Cancellation is a publication gate, not preemption: the executor polls
// cancel_flag() between nodes, and TryBeginPublication() decides atomically whether the
// call's results are published (completing the token) or dropped (cancel won).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace onnx_light::core::runtime {

class TaskCompletion {
 public:
  enum class State { kPending, kCancelled, kCompleted };

  TaskCompletion() = default;
  TaskCompletion(const TaskCompletion&) = delete;
  TaskCompletion& operator=(const TaskCompletion&) = delete;

  // Thread safe. Cancels a pending token; cancelling an already cancelled token keeps the
  // first reason. Throws kFailedPrecondition once the token completed (results published).
  void Cancel(std::string reason = "cancelled");

  // Called by the publisher right before its owner swap. Exactly one of a concurrent Cancel
  // and this call wins: true means the token is now kCompleted and the caller must publish;
  // false means it was cancelled and nothing may be published.
  bool TryBeginPublication();

  // Binds the token to one call (single use). Throws kCancelled when already cancelled and
  // kFailedPrecondition when a call already used it.
  void Attach();

  State state() const { return state_.load(std::memory_order_acquire); }
  bool cancelled() const { return state() == State::kCancelled; }
  bool done() const { return state() != State::kPending; }
  bool attached() const { return attached_.load(std::memory_order_acquire); }
  std::string reason() const;

  // Set (release) when Cancel wins; the executor polls it (acquire) between nodes.
  const std::atomic<bool>& cancel_flag() const { return cancel_flag_; }

 private:
  std::atomic<State> state_{State::kPending};
  std::atomic<bool> cancel_flag_{false};
  std::atomic<bool> attached_{false};
  mutable std::mutex reason_mutex_;
  std::string reason_;
};

const char* TaskCompletionStateName(TaskCompletion::State state);

}  // namespace onnx_light::core::runtime
