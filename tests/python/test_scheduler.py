"""runtime.RequestScheduler from Python and its asyncio front (onnx_light.aio): many requests
on the tiny decoder give exactly the tokens runtime.generate gives alone, the in-flight bound
holds, streaming, cancellation, error isolation, stats."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import onnx_light.aio as aio
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime

CONFIG = TinyDecoderConfig()
PROMPTS = [[40, 41, 42], [7], [90, 3, 3, 12], [55, 56], [1, 2, 3, 4, 5], [33], [70, 8]]


@pytest.fixture(scope="module")
def model():
    return build_tiny_decoder(config=CONFIG)


@pytest.fixture()
def context():
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))


def feeds(prompt):
    return {"input_ids": np.array([prompt], np.int64), **empty_cache(CONFIG)}


def alone(model, context, prompt, tokens):
    options = runtime.GenerationOptions(max_new_tokens=tokens)
    return np.from_dlpack(runtime.generate(model, context, feeds(prompt), options))


def test_concurrent_requests_give_the_tokens_each_gives_alone(model, context):
    expected = [alone(model, context, p, 10) for p in PROMPTS]
    scheduler = runtime.RequestScheduler(context, max_in_flight=3)
    options = runtime.GenerationOptions(max_new_tokens=10)
    streamed = {i: [] for i in range(len(PROMPTS))}

    def on_token(i):
        return lambda step, tokens: streamed[i].append(tokens[0])

    handles = [scheduler.submit(model, feeds(p), options, on_token=on_token(i))
               for i, p in enumerate(PROMPTS)]
    for i, handle in enumerate(handles):
        tokens = np.from_dlpack(handle.result())
        np.testing.assert_array_equal(tokens, expected[i])
        assert streamed[i] == tokens[0, len(PROMPTS[i]):].tolist()
        stats = handle.stats()
        assert stats["id"] == handle.id
        assert stats["tokens"] == 10
        assert len(stats["token_latency_ns"]) == 10 and len(stats["step_ns"]) == 10
        assert stats["time_to_first_token_ns"] >= stats["queue_wait_ns"]
        assert stats["used_persistent_state"] and not stats["cancelled"]
    scheduler.wait_idle()
    assert scheduler.peak_in_flight == 3
    assert scheduler.in_flight == 0 and scheduler.queued == 0


def test_cancel_returns_the_tokens_so_far_and_errors_stay_with_their_request(model, context):
    scheduler = runtime.RequestScheduler(context, max_in_flight=2)
    options = runtime.GenerationOptions(max_new_tokens=12)
    box = {}

    def stop_after_three(step, tokens):
        if step == 2:
            box["handle"].cancel("enough")

    box["handle"] = scheduler.submit(model, feeds(PROMPTS[0]), options, on_token=stop_after_three)
    bad = scheduler.submit(model, {"past_key_0": np.zeros((1, 4, 0, 16), np.float32)}, options)
    good = scheduler.submit(model, feeds(PROMPTS[1]), options)

    cancelled = np.from_dlpack(box["handle"].result())
    full = alone(model, context, PROMPTS[0], 12)
    np.testing.assert_array_equal(cancelled, full[:, :len(PROMPTS[0]) + 3])
    assert box["handle"].stats()["cancelled"]
    assert box["handle"].completion.reason == "enough"
    with pytest.raises(ValueError, match="input_ids"):
        bad.result()
    np.testing.assert_array_equal(np.from_dlpack(good.result()),
                                  alone(model, context, PROMPTS[1], 12))


def test_a_callers_task_completion_cancels_its_request(model, context):
    scheduler = runtime.RequestScheduler(context, max_in_flight=2)
    completion = runtime.TaskCompletion()

    def cancel_at_step_1(step, tokens):
        if step == 1:
            completion.cancel("caller stopped it")

    handle = scheduler.submit(model, feeds(PROMPTS[4]), runtime.GenerationOptions(max_new_tokens=9),
                              on_token=cancel_at_step_1, completion=completion)
    full = alone(model, context, PROMPTS[4], 9)
    np.testing.assert_array_equal(np.from_dlpack(handle.result()), full[:, :len(PROMPTS[4]) + 2])
    assert handle.completion is completion
    assert handle.stats()["cancelled"] and handle.stats()["tokens"] == 2


def test_a_python_callback_error_fails_only_its_request(model, context):
    scheduler = runtime.RequestScheduler(context, max_in_flight=2)
    options = runtime.GenerationOptions(max_new_tokens=4)

    def boom(step, tokens):
        raise KeyError("callback broke")

    failing = scheduler.submit(model, feeds(PROMPTS[2]), options, on_token=boom)
    fine = scheduler.submit(model, feeds(PROMPTS[3]), options)
    with pytest.raises(KeyError, match="callback broke"):
        failing.result()
    np.testing.assert_array_equal(np.from_dlpack(fine.result()),
                                  alone(model, context, PROMPTS[3], 4))


def test_a_queued_request_cancelled_completes_at_once_with_its_prompt(model, context):
    scheduler = runtime.RequestScheduler(context, max_in_flight=1, max_parallel_steps=1)
    first_token, release = threading.Event(), threading.Event()

    def hold(step, tokens):
        if step == 0:
            first_token.set()
            release.wait()

    options = runtime.GenerationOptions(max_new_tokens=3)
    running = scheduler.submit(model, feeds(PROMPTS[0]), options, on_token=hold)
    assert first_token.wait(30)
    queued = scheduler.submit(model, feeds(PROMPTS[1]), options)
    assert scheduler.queued == 1
    queued.cancel()
    assert queued.done()
    np.testing.assert_array_equal(np.from_dlpack(queued.result()), np.array([PROMPTS[1]]))
    assert queued.stats()["tokens"] == 0
    release.set()
    np.testing.assert_array_equal(np.from_dlpack(running.result()),
                                  alone(model, context, PROMPTS[0], 3))


def test_asyncio_gather_stream_and_task_cancellation(model, context):
    scheduler = runtime.RequestScheduler(context, max_in_flight=2)
    options = runtime.GenerationOptions(max_new_tokens=8)
    expected = [alone(model, context, p, 8) for p in PROMPTS[:4]]

    async def main():
        results = await asyncio.gather(
            *(scheduler.submit_async(model, feeds(p), options) for p in PROMPTS[:4]))
        for result, want in zip(results, expected):
            np.testing.assert_array_equal(result.tokens, want)
            assert result.stats["tokens"] == 8

        stream = scheduler.stream(model, feeds(PROMPTS[0]), options)
        streamed = [tokens[0] async for tokens in stream]
        assert streamed == expected[0][0, len(PROMPTS[0]):].tolist()

        # Leaving a stream early cancels its request.
        async for _ in scheduler.stream(model, feeds(PROMPTS[1]), options):
            break

        # Cancelling the awaiting task cancels the request; the scheduler keeps serving.
        started = asyncio.Event()
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(scheduler.submit_async(
            model, feeds(PROMPTS[2]), runtime.GenerationOptions(max_new_tokens=400),
            on_token=lambda step, tokens: loop.call_soon_threadsafe(started.set)))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await scheduler.submit_async(model, feeds(PROMPTS[3]), options)
        np.testing.assert_array_equal(after.tokens, expected[3])

    asyncio.run(main())
    scheduler.wait_idle()
    assert scheduler.in_flight == 0
