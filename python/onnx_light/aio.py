"""asyncio front of the runtime.

    import onnx_light.aio  # adds PersistentValueState.run_async
    outputs = await state.run_async(context, feeds)
    async for tokens in onnx_light.aio.generate_stream(model, context, feeds, options):
        ...
    scheduler = runtime.RequestScheduler(context, max_in_flight=4)
    result = await scheduler.submit_async(model, feeds, options)   # tokens + stats
    async for tokens in scheduler.stream(model, feeds, options):
        ...

Runs execute on a worker thread with the GIL released, so the event loop keeps serving
other requests. Cancelling the awaiting asyncio task cancels the run through a
runtime.TaskCompletion: a run that had not yet published leaves the state exactly as it
was (a publication gate, not preemption); the task then raises asyncio.CancelledError.
Calls on one state must still not overlap: await one run before starting the next.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading

import numpy as np

from onnx_light.onnx_py._onnxpykernels import runtime


async def run_async(state, context, feeds, completion=None, output_names=None):
    """`await state.run_async(context, feeds)`: state.run on a worker thread (output_names as
    for state.run)."""
    loop = asyncio.get_running_loop()
    completion = completion if completion is not None else runtime.TaskCompletion()
    future = loop.run_in_executor(None, state.run, context, feeds, completion, output_names)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        try:
            completion.cancel("asyncio task cancelled")
        except RuntimeError:
            pass  # already published: the state advanced before the cancellation arrived
        # Never leave a run in flight on a state the caller may reuse: wait for it to end.
        try:
            await future
        except Exception:  # noqa: BLE001 - the cancellation error (or a kernel error)
            pass
        raise


runtime.PersistentValueState.run_async = run_async


async def generate_stream(model, context, feeds, options=None, session_options=None):
    """Async iterator over each step's tokens; cancelling the consuming task stops the
    generation before its next token."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()
    completion = runtime.TaskCompletion()

    def on_token(step, tokens):
        loop.call_soon_threadsafe(events.put_nowait, ("token", tokens))
        return not stop.is_set()

    def worker():
        try:
            result = runtime.generate(model, context, feeds, options, session_options,
                                      on_token=on_token, completion=completion)
            loop.call_soon_threadsafe(events.put_nowait, ("done", result))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            loop.call_soon_threadsafe(events.put_nowait, ("error", exc))

    done = loop.run_in_executor(None, worker)
    try:
        while True:
            kind, value = await events.get()
            if kind == "token":
                yield value
            elif kind == "done":
                return
            else:
                raise value
    finally:
        stop.set()
        try:
            completion.cancel("stream closed")
        except RuntimeError:
            pass
        await asyncio.shield(done)


async def generate(model, context, feeds, options=None, session_options=None) -> np.ndarray:
    """The full INT64 result of runtime.generate, awaited without blocking the loop."""
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(
        None, lambda: runtime.generate(model, context, feeds, options, session_options))
    return np.from_dlpack(result)


@dataclasses.dataclass
class ScheduledResult:
    """What `await scheduler.submit_async(...)` returns."""
    tokens: np.ndarray  # INT64 [batch, prompt + generated]
    stats: dict  # RequestHandle.stats(): tokens, queue_wait_ns, time_to_first_token_ns, ...


def _finish(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _submit(scheduler, loop, future, model, feeds, options, session_options, **kwargs):
    def on_done():
        loop.call_soon_threadsafe(_finish, future)

    return scheduler.submit(model, feeds, options, session_options, on_done=on_done, **kwargs)


async def submit_async(scheduler, model, feeds, options=None, session_options=None, *,
                       on_token=None, completion=None, on_submit=None) -> ScheduledResult:
    """`await scheduler.submit_async(model, feeds, options)`: one request through a
    runtime.RequestScheduler, awaited without blocking the loop. Cancelling the awaiting task
    cancels the request (before its next token) and waits until it has stopped.
    on_submit(handle), if given, receives the RequestHandle at once (its stats() stay
    readable after a cancellation)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    handle = _submit(scheduler, loop, done, model, feeds, options, session_options,
                     on_token=on_token, completion=completion)
    if on_submit is not None:
        on_submit(handle)
    try:
        await asyncio.shield(done)
    except asyncio.CancelledError:
        handle.cancel("asyncio task cancelled")
        await done
        raise
    # Completed: result() and stats() return at once (or raise the request's error).
    return ScheduledResult(np.from_dlpack(handle.result()), handle.stats())


async def scheduler_stream(scheduler, model, feeds, options=None, session_options=None, *,
                           on_submit=None):
    """`async for tokens in scheduler.stream(model, feeds, options)`: each step's tokens of
    one scheduled request as it publishes them. Leaving the loop early (or cancelling the
    consuming task) cancels the request: close the iterator (contextlib.aclosing) to do it
    at once rather than when it is garbage collected. on_submit(handle) as for
    submit_async."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    done = loop.create_future()

    def on_token(step, tokens):
        loop.call_soon_threadsafe(events.put_nowait, tokens)

    handle = _submit(scheduler, loop, done, model, feeds, options, session_options,
                     on_token=on_token)
    if on_submit is not None:
        on_submit(handle)
    finished = False
    try:
        while not finished:
            waiter = asyncio.ensure_future(events.get())
            await asyncio.wait([waiter, done], return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                yield waiter.result()
                continue
            waiter.cancel()
            finished = True
        # Tokens queued before completion come first; then the request's error, if any.
        while not events.empty():
            yield events.get_nowait()
        handle.result()
    finally:
        if not finished:
            handle.cancel("stream closed")
            await asyncio.shield(done)


runtime.RequestScheduler.submit_async = submit_async
runtime.RequestScheduler.stream = scheduler_stream
