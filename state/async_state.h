// asio completion-token forms of PersistentValueState::Run and Generate, for async C++
// services:
//
//   #include "state/async_state.h"
//   RuntimeValueMap out = co_await state.AsyncRun(context, feeds, asio::use_awaitable);
//   Tensor tokens = co_await AsyncGenerate(model, context, feeds, options, asio::use_awaitable);
//
// Callbacks (void(std::exception_ptr, Result)) and asio::use_future work the same way. The
// run executes on a TBB worker; the handler resumes on its own executor. Emitting the
// handler's cancellation slot cancels through a TaskCompletion: a run that has not yet
// published leaves the state unchanged and completes with a kCancelled error; a generation
// stops before its next token and returns the tokens so far.
#pragma once

#include <memory>
#include <utility>

#include "executor/async_run.h"
#include "state/generate.h"
#include "state/persistent_value_state.h"
#include "state/task_completion.h"

namespace onnx_light::core::runtime {

namespace detail {
inline void CancelQuietly(TaskCompletion* completion, const char* reason) {
  try {
    completion->Cancel(reason);
  } catch (const Error&) {
    // Already completed: the result was published before the cancellation arrived.
  }
}
}  // namespace detail

template <typename CompletionToken>
auto PersistentValueState::AsyncRun(RuntimeContext& context, RuntimeValueMap feeds,
                                    CompletionToken&& token, TaskCompletion* completion) {
  std::shared_ptr<TaskCompletion> owned;
  if (completion == nullptr) {
    owned = std::make_shared<TaskCompletion>();
    completion = owned.get();
  }
  return AsyncRunOnArena<RuntimeValueMap>(
      [this, &context, feeds = std::move(feeds), completion, owned]() mutable {
        return Run(context, std::move(feeds), completion);
      },
      [completion, owned] { detail::CancelQuietly(completion, "asio cancellation"); },
      std::forward<CompletionToken>(token));
}

template <typename CompletionToken>
auto AsyncGenerate(std::shared_ptr<const ModelProto> model, RuntimeContext& context,
                   RuntimeValueMap feeds, GenerationOptions options, CompletionToken&& token,
                   RuntimeSessionOptions session_options = {}, TokenCallback on_token = nullptr) {
  auto cancel = std::make_shared<TaskCompletion>();
  return AsyncRunOnArena<Tensor>(
      [model = std::move(model), &context, feeds = std::move(feeds), options = std::move(options),
       session_options, on_token = std::move(on_token), cancel]() mutable {
        return Generate(model, context, std::move(feeds), options, session_options, on_token,
                        cancel.get());
      },
      [cancel] { detail::CancelQuietly(cancel.get(), "asio cancellation"); },
      std::forward<CompletionToken>(token));
}

}  // namespace onnx_light::core::runtime
