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


def held_until(event, on_token=None):
    """An on_token for a test's first request: it waits at its first token until `event` is
    set (after the test has submitted every request), so the requests overlap as the test
    expects however slowly the submitting thread runs; then calls `on_token`."""
    def hold(step, tokens):
        assert event.wait(timeout=60)
        if on_token is not None:
            on_token(step, tokens)
    return hold


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

    submitted = threading.Event()
    handles = [scheduler.submit(model, feeds(p), options,
                                on_token=held_until(submitted, on_token(i)) if i == 0 else
                                on_token(i))
               for i, p in enumerate(PROMPTS)]
    submitted.set()
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


# Batched mode (continuous batching, issue 15): the paged tiny decoder with row caches.
PAGED = TinyDecoderConfig(paged=True, row_caches=True)


@pytest.fixture(scope="module")
def paged_model():
    return build_tiny_decoder(config=PAGED)


def paged_feeds(prompt):
    return {"input_ids": np.array([prompt], np.int64), **empty_cache(PAGED)}


def paged_alone(model, context, prompt, options):
    tokens = runtime.generate(model, context, paged_feeds(prompt), options)
    return np.from_dlpack(tokens)[0].tolist()


def paged_cases(model, context):
    """16 requests: prompt lengths 1..11, greedy and sampled, max_new_tokens or a stop token,
    some cancelled from their own callback of step 2, four submitted late."""
    cases = []
    for i in range(16):
        prompt = [(i * 13 + t * 5) % 95 for t in range(1 + i * 7 % 11)]
        kw = dict(max_new_tokens=24 if i == 0 else 4 + i % 5 * 3)
        if i % 4 == 3:
            kw.update(temperature=0.8, top_k=10, seed=100 + i)
        expected = paged_alone(model, context, prompt, runtime.GenerationOptions(**kw))
        if i % 5 == 1:  # stops at its own third new token
            kw["stop_token_ids"] = [expected[len(prompt) + 2]]
            expected = paged_alone(model, context, prompt, runtime.GenerationOptions(**kw))
        cancel_at = 2 if i % 5 == 2 else None
        if cancel_at is not None:
            expected = expected[:len(prompt) + cancel_at + 1]
        cases.append(dict(prompt=prompt, options=runtime.GenerationOptions(**kw),
                          cancel_at=cancel_at, late=i >= 12, expected=expected))
    return cases


def test_batched_mode_gives_every_request_the_tokens_it_gives_alone(paged_model, context):
    cases = paged_cases(paged_model, context)
    scheduler = runtime.RequestScheduler(context, max_in_flight=16)
    handles = {}

    def submit(i):
        case = cases[i]
        completion = runtime.TaskCompletion()

        def on_token(step, tokens):
            if step == case["cancel_at"]:
                completion.cancel("enough")
            if i == 0 and step == 2:  # the late ones join while request 0 decodes
                for j, late in enumerate(cases):
                    if late["late"]:
                        submit(j)

        handles[i] = scheduler.submit(paged_model, paged_feeds(case["prompt"]), case["options"],
                                      on_token=on_token, completion=completion)

    for i, case in enumerate(cases):
        if not case["late"]:
            submit(i)
    scheduler.wait_idle()
    for i, case in enumerate(cases):
        assert np.from_dlpack(handles[i].result())[0].tolist() == case["expected"], i
        stats = handles[i].stats()
        assert stats["mode"] == "batched"
        assert stats["cancelled"] == (case["cancel_at"] is not None)
    stats = scheduler.stats()
    assert stats["mode"] == "batched" and stats["batched_requests"] == 16
    assert stats["max_batch_size"] > 1
    assert stats["batched_calls"] == len(stats["batch_sizes"])
    generated = sum(len(c["expected"]) - len(c["prompt"]) for c in cases)
    assert stats["batched_calls"] < generated


def test_batched_mode_a_bad_request_fails_alone(paged_model, context):
    options = runtime.GenerationOptions(max_new_tokens=8)
    good_prompt, bad_prompt = [4, 9, 2], [4, 200, 2]  # vocab 95
    with pytest.raises(Exception) as alone_error:
        paged_alone(paged_model, context, bad_prompt, options)
    scheduler = runtime.RequestScheduler(context, max_in_flight=8)
    joined = {}

    def join(step, tokens):  # both prompts (length 3) share one call
        if step == 1:
            joined["bad"] = scheduler.submit(paged_model, paged_feeds(bad_prompt), options)
            joined["good"] = scheduler.submit(paged_model, paged_feeds(good_prompt), options)

    first = scheduler.submit(paged_model, paged_feeds([7, 7]), options, on_token=join)
    scheduler.wait_idle()
    assert np.from_dlpack(first.result())[0].tolist() == paged_alone(paged_model, context, [7, 7],
                                                                     options)
    assert np.from_dlpack(joined["good"].result())[0].tolist() == paged_alone(
        paged_model, context, good_prompt, options)
    with pytest.raises(type(alone_error.value)) as error:
        joined["bad"].result()
    assert str(error.value) == str(alone_error.value)


def test_contiguous_caches_or_batch_rows_false_keep_per_request_steps(model, paged_model, context):
    options = runtime.GenerationOptions(max_new_tokens=5)
    for m, kw, make_feeds in ((model, {}, feeds),
                              (paged_model, {"batch_rows": False}, paged_feeds)):
        scheduler = runtime.RequestScheduler(context, max_in_flight=2, **kw)
        handle = scheduler.submit(m, make_feeds(PROMPTS[0]), options)
        expected = np.from_dlpack(runtime.generate(m, context, make_feeds(PROMPTS[0]), options))
        np.testing.assert_array_equal(np.from_dlpack(handle.result()), expected)
        assert handle.stats()["mode"] == "per_request"
        scheduler.wait_idle()
        assert scheduler.stats()["mode"] == "per_request"
        assert scheduler.stats()["batched_calls"] == 0


def test_chunked_prefill_gives_the_tokens_generate_gives_with_the_same_chunks(model, paged_model,
                                                                              context):
    chunked = runtime.GenerationOptions(max_new_tokens=6, prefill_chunk=2)
    assert chunked.prefill_chunk == 2
    prompts = [[5, 8, 13, 21, 34], [3, 1, 4, 1, 5, 9, 2], [7]]
    for m, make_feeds in ((paged_model, paged_feeds), (model, feeds)):
        scheduler = runtime.RequestScheduler(context, max_in_flight=4)
        handles = [scheduler.submit(m, make_feeds(p), chunked) for p in prompts]
        for handle, p in zip(handles, prompts):
            expected = np.from_dlpack(runtime.generate(m, context, make_feeds(p), chunked))
            np.testing.assert_array_equal(np.from_dlpack(handle.result()), expected)
            assert handle.stats()["tokens"] == 6
        scheduler.wait_idle()
    with pytest.raises(ValueError, match="prefill_chunk must be >= 0, got -1"):
        runtime.generate(model, context, feeds([1, 2]),
                         runtime.GenerationOptions(prefill_chunk=-1))


def test_a_kv_budget_queues_requests_until_they_fit_and_refuses_one_that_never_fits(
        paged_model, context):
    options = runtime.GenerationOptions(max_new_tokens=8)  # 1 x (3 + 8) = 11 tokens each
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    scheduler = runtime.RequestScheduler(context, max_in_flight=8, max_kv_tokens=25)
    submitted = threading.Event()
    handles = [scheduler.submit(paged_model, paged_feeds(p), options,
                                on_token=held_until(submitted) if i == 0 else None)
               for i, p in enumerate(prompts)]
    submitted.set()
    too_big = scheduler.submit(paged_model, paged_feeds([1] * 20), options)  # 28 > 25
    with pytest.raises(MemoryError, match="needs 28 KV tokens .* max_kv_tokens is 25"):
        too_big.result()
    for handle, p in zip(handles, prompts):
        assert np.from_dlpack(handle.result())[0].tolist() == paged_alone(paged_model, context, p,
                                                                          options)
    scheduler.wait_idle()
    assert scheduler.peak_in_flight == 2
    stats = scheduler.stats()
    assert stats["peak_kv_tokens_reserved"] == 22 and stats["kv_tokens_reserved"] == 0


# kv_admission="grow_and_preempt": admitted on the prompt, charged as the caches grow, the
# newest running request preempted (and recomputed when readmitted) when a step would not fit.
def test_grow_and_preempt_gives_every_preempted_request_its_alone_tokens(paged_model, context):
    prompts = [[(i * 11 + t * 7) % 95 for t in range(1 + i * 5 % 11)] for i in range(12)]
    options = [runtime.GenerationOptions(max_new_tokens=6 + i % 4 * 3) for i in range(12)]
    expected = [paged_alone(paged_model, context, p, o) for p, o in zip(prompts, options)]
    scheduler = runtime.RequestScheduler(context, max_in_flight=16, max_kv_tokens=40,
                                         kv_admission="grow_and_preempt")
    assert scheduler.kv_admission == "grow_and_preempt" and scheduler.max_kv_tokens == 40
    streamed = {i: [] for i in range(12)}

    def on_token(i):
        return lambda step, tokens: streamed[i].append((step, tokens[0]))

    submitted = threading.Event()
    handles = [scheduler.submit(paged_model, paged_feeds(p), o,
                                on_token=held_until(submitted, on_token(i)) if i == 0 else
                                on_token(i))
               for i, (p, o) in enumerate(zip(prompts, options))]
    submitted.set()
    preemptions = 0
    for i, handle in enumerate(handles):
        tokens = np.from_dlpack(handle.result())[0].tolist()
        assert tokens == expected[i], i
        # Every step once, in order: nothing repeated or lost across preemptions.
        assert streamed[i] == list(enumerate(tokens[len(prompts[i]):])), i
        preemptions += handle.stats()["preemptions"]
    scheduler.wait_idle()
    stats = scheduler.stats()
    assert stats["preemptions"] > 0 and stats["preemptions"] == preemptions
    assert stats["peak_kv_tokens_reserved"] <= 40 and stats["kv_tokens_reserved"] == 0


def test_grow_and_preempt_cancel_while_preempted_and_refusal(paged_model, context):
    older, newer = [3, 9], [8, 1, 5, 2]
    older_options = runtime.GenerationOptions(max_new_tokens=16)  # 2 + 16 <= 20
    newer_options = runtime.GenerationOptions(max_new_tokens=14)  # 4 + 14 <= 20
    newer_alone = paged_alone(paged_model, context, newer, newer_options)
    scheduler = runtime.RequestScheduler(context, max_in_flight=4, max_kv_tokens=20,
                                         kv_admission="grow_and_preempt")
    box, newer_streamed = {}, []
    lock = threading.Lock()
    newer_submitted = threading.Event()

    # The newer one is preempted once both caches exceed 20 tokens and cannot come back
    # before the older one ends: the older one's next token cancels it while preempted.
    # The older one waits at its tokens until the newer one is submitted: alone, on a busy
    # machine, it could end before the newer one joins, and nothing would be preempted.
    def cancel_the_preempted(step, tokens):
        assert newer_submitted.wait(timeout=60)
        with lock:
            if "cancelled" not in box and scheduler.stats()["preemptions"] == 1:
                box["newer"].cancel("preempted and no longer wanted")
                box["cancelled"] = step

    first = scheduler.submit(paged_model, paged_feeds(older), older_options,
                             on_token=cancel_the_preempted)
    with lock:
        box["newer"] = scheduler.submit(paged_model, paged_feeds(newer), newer_options,
                                        on_token=lambda s, t: newer_streamed.append(t[0]))
    newer_submitted.set()
    too_big = scheduler.submit(paged_model, paged_feeds([1, 1, 1]),
                               runtime.GenerationOptions(max_new_tokens=18))
    with pytest.raises(MemoryError, match=r"request 2 needs 21 KV tokens \(rows x \(prompt \+ "
                                          r"max_new_tokens\)\) but max_kv_tokens is 20"):
        too_big.result()
    assert np.from_dlpack(first.result())[0].tolist() == paged_alone(paged_model, context, older,
                                                                     older_options)
    tokens = np.from_dlpack(box["newer"].result())[0].tolist()
    stats = box["newer"].stats()
    assert stats["cancelled"] and stats["preemptions"] == 1
    assert len(newer) < len(tokens) < len(newer_alone)
    assert tokens == newer_alone[:len(tokens)]
    assert newer_streamed == tokens[len(newer):]
    scheduler.wait_idle()
    assert scheduler.stats()["kv_tokens_reserved"] == 0
    with pytest.raises(ValueError, match="kv_admission must be 'reserve_worst_case', "
                                         "'grow_and_preempt' or 'grow_and_refuse', got 'lazy'"):
        runtime.RequestScheduler(context, kv_admission="lazy")


def test_a_kv_budget_in_bytes_uses_the_declared_bytes_per_token(model, paged_model, context):
    # The contiguous tiny decoder declares past_{key,value}_i [batch, 4, past, 16] FLOAT:
    # 2 layers x 2 caches x 4 x 16 x 4 bytes = 1024 bytes per token.
    options = runtime.GenerationOptions(max_new_tokens=8)  # 1 x (3 + 8) = 11 tokens each
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    scheduler = runtime.RequestScheduler(context, max_in_flight=8, max_kv_bytes=25 * 1024)
    assert scheduler.max_kv_bytes == 25 * 1024 and scheduler.max_kv_tokens == 0
    submitted = threading.Event()
    handles = [scheduler.submit(model, feeds(p), options,
                                on_token=held_until(submitted) if i == 0 else None)
               for i, p in enumerate(prompts)]
    submitted.set()
    too_big = scheduler.submit(model, feeds([1] * 20), options)  # 28 x 1024 > 25 x 1024
    with pytest.raises(MemoryError, match=r"needs 28672 KV bytes \(rows x \(prompt \+ "
                                          r"max_new_tokens\) x 1024 bytes per token\) but "
                                          r"max_kv_bytes is 25600"):
        too_big.result()
    for handle, p in zip(handles, prompts):
        np.testing.assert_array_equal(np.from_dlpack(handle.result()), alone(model, context, p, 8))
    scheduler.wait_idle()
    assert scheduler.peak_in_flight == 2
    stats = scheduler.stats()
    assert stats["peak_kv_bytes_reserved"] == 22 * 1024 and stats["kv_bytes_reserved"] == 0
    # The paged tiny decoder declares its caches without a layout: no size per token.
    refused = scheduler.submit(paged_model, paged_feeds([1, 2]), options)
    with pytest.raises(ValueError, match="max_kv_bytes needs the model's KV bytes per token, but "
                                         "the declaration of the cache input 'past_0' gives no "
                                         "size per token"):
        refused.result()
    with pytest.raises(ValueError, match="set max_kv_tokens or max_kv_bytes, not both"):
        runtime.RequestScheduler(context, max_kv_tokens=10, max_kv_bytes=10)


def test_grow_and_refuse_fails_the_request_that_cannot_grow(paged_model, context):
    older, newer = [3, 9], [8, 1, 5, 2]
    older_options = runtime.GenerationOptions(max_new_tokens=16)  # 2 + 16 <= 20
    newer_options = runtime.GenerationOptions(max_new_tokens=14)  # 4 + 14 <= 20
    scheduler = runtime.RequestScheduler(context, max_in_flight=4, max_kv_tokens=20,
                                         kv_admission="grow_and_refuse")
    streamed = []
    submitted = threading.Event()  # the older one must not end before the newer one joins
    first = scheduler.submit(paged_model, paged_feeds(older), older_options,
                             on_token=held_until(submitted))
    second = scheduler.submit(paged_model, paged_feeds(newer), newer_options,
                              on_token=lambda step, tokens: streamed.append(tokens[0]))
    submitted.set()
    with pytest.raises(MemoryError, match=r"request 1 cannot grow its KV cache: its next step "
                                          r"needs \d+ KV tokens, the other requests hold \d+ of "
                                          r"max_kv_tokens 20 \(kv_admission grow_and_refuse\)"):
        second.result()
    assert np.from_dlpack(first.result())[0].tolist() == paged_alone(paged_model, context, older,
                                                                     older_options)
    newer_alone = paged_alone(paged_model, context, newer, newer_options)
    assert 0 < len(streamed) < 14 and streamed == newer_alone[4:4 + len(streamed)]
    scheduler.wait_idle()
    stats = scheduler.stats()
    assert stats["preemptions"] == 0 and stats["kv_tokens_reserved"] == 0
