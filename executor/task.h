// Task<T>: a lazily started C++20 coroutine. Awaiting a Task starts it and resumes the
// awaiter when it finishes, through symmetric transfer (final_suspend returns the
// awaiting coroutine's handle), so long chains of synchronously completing awaits use no
// stack. SyncWait drives a Task from ordinary code. Exceptions propagate to the awaiter.
// Awaiting an empty Task (default-constructed or moved from) throws Error(kInvalidArgument).
//
// Symmetric transfer relies on tail calls: CMakeLists.txt adds -foptimize-sibling-calls so
// that unoptimised builds behave like optimised ones.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <semaphore>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace onnx_light::core::runtime {

template <typename T = void>
class Task;

namespace detail {

template <typename T>
struct TaskPromiseBase {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      return h.promise().continuation;
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <typename T>
struct TaskPromise : TaskPromiseBase<T> {
  std::optional<T> value;
  Task<T> get_return_object() noexcept;
  template <typename U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T Take() {
    if (this->error) std::rethrow_exception(this->error);
    return std::move(*value);
  }
};

template <>
struct TaskPromise<void> : TaskPromiseBase<void> {
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void Take() {
    if (this->error) std::rethrow_exception(this->error);
  }
};

}  // namespace detail

template <typename T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : handle_(h) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  bool valid() const { return static_cast<bool>(handle_); }

  // co_await task: start it and continue here when it is done.
  auto operator co_await() && noexcept {
    struct Awaiter {
      Handle handle;
      bool await_ready() noexcept { return !handle || handle.done(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        handle.promise().continuation = awaiting;
        return handle;
      }
      T await_resume() {
        if (!handle)
          Throw(ErrorCode::kInvalidArgument,
                "co_await of an empty Task (default-constructed or moved from)");
        return handle.promise().Take();
      }
    };
    return Awaiter{handle_};
  }

 private:
  Handle handle_;
};

namespace detail {
template <typename T>
Task<T> TaskPromise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<TaskPromise<T>>::from_promise(*this));
}
inline Task<void> TaskPromise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<TaskPromise<void>>::from_promise(*this));
}
}  // namespace detail

namespace detail {
// Drives one Task for SyncWait. It starts when SyncWait resumes it; once the task is done
// it signals `done` and stays suspended at its final point, so that SyncWait destroys both
// frames on the waiting thread, whichever thread finished the task.
struct SyncWaitDriver {
  struct promise_type {
    std::binary_semaphore* done = nullptr;
    SyncWaitDriver get_return_object() noexcept {
      return SyncWaitDriver(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      // The frame is suspended here: the waiting thread may destroy it once released.
      void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        h.promise().done->release();
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };

  explicit SyncWaitDriver(std::coroutine_handle<promise_type> h) : handle(h) {}
  SyncWaitDriver(SyncWaitDriver&& other) noexcept : handle(std::exchange(other.handle, {})) {}
  SyncWaitDriver& operator=(SyncWaitDriver&&) = delete;
  ~SyncWaitDriver() {
    if (handle) handle.destroy();
  }

  // Runs the driver and blocks until it signals; its frame is destroyed with *this.
  void Wait() {
    std::binary_semaphore done{0};
    handle.promise().done = &done;
    handle.resume();
    done.acquire();
  }

  std::coroutine_handle<promise_type> handle;
};

// `task` stays owned by SyncWait: the driver only awaits it.
template <typename T>
SyncWaitDriver DriveAndSignal(Task<T>& task, std::optional<T>& out, std::exception_ptr& error) {
  try {
    out.emplace(co_await std::move(task));
  } catch (...) {
    error = std::current_exception();
  }
}

inline SyncWaitDriver DriveAndSignal(Task<void>& task, std::exception_ptr& error) {
  try {
    co_await std::move(task);
  } catch (...) {
    error = std::current_exception();
  }
}
}  // namespace detail

// Runs `task` to completion, blocking this thread until it finishes (wherever it resumes).
// The task's frame is destroyed on this thread, before SyncWait returns or throws.
template <typename T>
T SyncWait(Task<T> task) {
  std::exception_ptr error;
  if constexpr (std::is_void_v<T>) {
    detail::DriveAndSignal(task, error).Wait();
    task = Task<T>();
    if (error) std::rethrow_exception(error);
  } else {
    std::optional<T> out;
    detail::DriveAndSignal(task, out, error).Wait();
    task = Task<T>();
    if (error) std::rethrow_exception(error);
    return std::move(*out);
  }
}

}  // namespace onnx_light::core::runtime
