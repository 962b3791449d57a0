"""Token streaming over runtime.generate: an iterator that yields each step's tokens while
generation runs on a worker thread (the GIL is released while kernels run).

    from onnx_light.streaming import generate_stream
    for tokens in generate_stream(model, context, feeds, options):
        print(tokens)            # one token per batch row, as soon as it is chosen

Leaving the loop early (break, exception, garbage collection) stops generation before its
next token. The generator's return value (StopIteration.value) is the full INT64 result.
"""
from __future__ import annotations

import queue
import threading

import numpy as np

from onnx_light.onnx_py._onnxpykernels import runtime


def generate_stream(model, context, feeds, options=None, session_options=None, completion=None):
    events: queue.Queue = queue.Queue()
    stop = threading.Event()

    def on_token(step, tokens):
        events.put(("token", tokens))
        return not stop.is_set()

    def worker():
        try:
            result = runtime.generate(model, context, feeds, options, session_options,
                                      on_token=on_token, completion=completion)
            events.put(("done", result))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            events.put(("error", exc))

    thread = threading.Thread(target=worker, name="onnx-light-generate", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = events.get()
            if kind == "token":
                yield value
            elif kind == "done":
                return np.from_dlpack(value)
            else:
                raise value
    finally:
        stop.set()
        thread.join()
