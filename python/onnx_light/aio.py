"""asyncio front of the runtime.

    import onnx_light.aio  # adds PersistentValueState.run_async
    outputs = await state.run_async(context, feeds)
    async for tokens in onnx_light.aio.generate_stream(model, context, feeds, options):
        ...

Runs execute on a worker thread with the GIL released, so the event loop keeps serving
other requests. Cancelling the awaiting asyncio task cancels the run through a
runtime.TaskCompletion: a run that had not yet published leaves the state exactly as it
was (a publication gate, not preemption); the task then raises asyncio.CancelledError.
Calls on one state must still not overlap: await one run before starting the next.
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np

from onnx_light.onnx_py._onnxpykernels import runtime


async def run_async(state, context, feeds, completion=None):
    """`await state.run_async(context, feeds)`: state.run on a worker thread."""
    loop = asyncio.get_running_loop()
    completion = completion if completion is not None else runtime.TaskCompletion()
    future = loop.run_in_executor(None, state.run, context, feeds, completion)
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
