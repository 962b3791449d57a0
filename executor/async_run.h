// asio completion-token adapter: runs blocking runtime work (a session or state run) on a
// TBB arena worker and completes the caller's handler on the handler's own executor, so a
// service writes `co_await state.AsyncRun(ctx, feeds, asio::use_awaitable)` and its
// io_context thread never blocks. Callbacks and asio::use_future work the same way.
//
// Completion signature: void(std::exception_ptr, Result). A cancellation signal on the
// handler's slot calls `on_cancel` (e.g. TaskCompletion::Cancel): cancellation is a
// publication gate, not preemption, so the run still completes and reports kCancelled.
//
// Include only where needed: asio headers are heavy.
#pragma once

#include <tbb/task_arena.h>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

namespace onnx_light::core::runtime {

// The arena that carries asynchronous runs (one per process, all cores). Runs themselves
// execute their graphs in their session's arena.
tbb::task_arena& AsyncRunArena();

template <typename Result, typename Work, typename CompletionToken>
auto AsyncRunOnArena(Work work, std::function<void()> on_cancel, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, Result)>(
      [](auto handler, Work work, std::function<void()> on_cancel) {
        using Handler = decltype(handler);
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected() && on_cancel)
          slot.assign([on_cancel](asio::cancellation_type) { on_cancel(); });
        auto tracked = asio::prefer(asio::get_associated_executor(handler),
                                    asio::execution::outstanding_work.tracked);
        // task_arena::enqueue calls its functor as const: keep the move-only parts shared.
        struct Op {
          Handler handler;
          Work work;
          decltype(tracked) executor;
        };
        auto op = std::make_shared<Op>(Op{std::move(handler), std::move(work), std::move(tracked)});
        AsyncRunArena().enqueue([op] {
          std::exception_ptr error;
          std::optional<Result> result;
          try {
            result.emplace(op->work());
          } catch (...) {
            error = std::current_exception();
          }
          auto ex = op->executor;
          asio::post(ex, [op, error, result = std::move(result)]() mutable {
            auto done_slot = asio::get_associated_cancellation_slot(op->handler);
            if (done_slot.is_connected()) done_slot.clear();
            std::move(op->handler)(error, result ? std::move(*result) : Result{});
          });
        });
      },
      token, std::move(work), std::move(on_cancel));
}

}  // namespace onnx_light::core::runtime
