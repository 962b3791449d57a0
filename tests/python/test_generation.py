"""Generation from Python: the spec's ReferenceEvaluator example, runtime.generate, exact
tokens against onnxruntime driving the same model step by step, streaming and asyncio."""
from __future__ import annotations

import asyncio
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_light.aio as aio
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx.reference import ReferenceEvaluator
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.streaming import generate_stream

CONFIG = TinyDecoderConfig()
PROMPT = np.array([[40, 41, 42, 10, 77]], np.int64)


@pytest.fixture(scope="module")
def model():
    return build_tiny_decoder(config=CONFIG)


def onnxruntime_greedy(prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    """onnxruntime on the same decoder: prompt once, then one token per call, caches fed back."""
    reference = build_tiny_decoder(onnx, CONFIG)  # the onnx package's messages: no bindings
    session = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cache, ids, start, out = empty_cache(CONFIG, prompt.shape[0]), prompt, 0, [prompt]
    for _ in range(new_tokens):
        positions = np.broadcast_to(np.arange(start, start + ids.shape[1]), ids.shape).astype(np.int64)
        result = dict(zip(names, session.run(None, {"input_ids": ids, "position_ids": positions, **cache})))
        ids = result["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        cache = {k: result[k.replace("past", "present")] for k in cache}
        start += positions.shape[1]
        out.append(ids)
    return np.concatenate(out, axis=1)


def test_greedy_generation_matches_onnxruntime_step_by_step(model):
    tokens = ReferenceEvaluator(model).generate({"input_ids": PROMPT, **empty_cache(CONFIG)},
                                                max_new_tokens=24)
    assert tokens.dtype == np.int64 and tokens.shape == (1, PROMPT.shape[1] + 24)
    np.testing.assert_array_equal(tokens, onnxruntime_greedy(PROMPT, 24))


def test_the_spec_example_samples_repeatably_and_stops_at_eos(model):
    evaluator = ReferenceEvaluator(model)
    initial_empty_caches = empty_cache(CONFIG)
    tokens = evaluator.generate({"input_ids": PROMPT, **initial_empty_caches},
                                max_new_tokens=32, temperature=0.7, seed=42, eos_token_id=2)
    again = evaluator.generate({"input_ids": PROMPT, **initial_empty_caches},
                               max_new_tokens=32, temperature=0.7, seed=42, eos_token_id=2)
    np.testing.assert_array_equal(tokens, again)
    np.testing.assert_array_equal(tokens[:, :PROMPT.shape[1]], PROMPT)
    generated = tokens[0, PROMPT.shape[1]:].tolist()
    assert len(generated) <= 32
    if 2 in generated:  # stopped at EOS: nothing after it
        assert generated.index(2) == len(generated) - 1


def test_batched_rows_are_padded_after_eos(model):
    prompt = np.array([[40, 41], [10, 11]], np.int64)
    free = ReferenceEvaluator(model).generate({"input_ids": prompt, **empty_cache(CONFIG, 2)},
                                              max_new_tokens=8)
    eos = int(free[0, 3])  # row 0's second generated token becomes EOS
    stopped = ReferenceEvaluator(model).generate({"input_ids": prompt, **empty_cache(CONFIG, 2)},
                                                 max_new_tokens=8, eos_token_id=eos, pad_token_id=0)
    assert stopped[0, 3] == eos and (stopped[0, 4:] == 0).all()
    row1 = free[1, 2:].tolist()
    expected_row1 = row1[: row1.index(eos) + 1] if eos in row1 else row1
    assert stopped[1, 2:2 + len(expected_row1)].tolist() == expected_row1


def test_runtime_generate_takes_options_and_leaves_feeds_unchanged(model):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    feeds = {"input_ids": PROMPT.copy(), **empty_cache(CONFIG)}
    before = feeds["input_ids"].copy()
    options = runtime.GenerationOptions(max_new_tokens=5, top_k=3, temperature=1.0, seed=7)
    a = np.from_dlpack(runtime.generate(model, context, feeds, options))
    b = np.from_dlpack(runtime.generate(model, context, feeds, options))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(feeds["input_ids"], before)
    with pytest.raises(ValueError, match="input_ids"):
        runtime.generate(model, context, {"tokens": PROMPT}, options)
    with pytest.raises(TypeError, match="unknown option 'max_tokens'"):
        runtime.GenerationOptions(max_tokens=3)


@pytest.mark.parametrize("ids, got", [
    (np.array([[40, 41]], np.int32), "INT32 [1, 2]"),  # numpy's default int on some systems
    (np.array([40, 41], np.int64), "INT64 [2]"),
    (np.zeros((1, 0), np.int64), "INT64 [1, 0]"),
    (np.zeros((0, 2), np.int64), "INT64 [0, 2]"),  # no batch row: refused before any kernel
])
def test_a_prompt_of_the_wrong_type_or_shape_is_refused_saying_what_it_got(model, ids, got):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    with pytest.raises(ValueError, match=r"generate: 'input_ids' must be a non-empty INT64 "
                                         rf"\[batch, prompt\] tensor, got {re.escape(got)}$"):
        runtime.generate(model, context, {"input_ids": ids, **empty_cache(CONFIG)},
                         runtime.GenerationOptions(max_new_tokens=2))


def test_streaming_yields_each_token_as_it_is_chosen(model):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    feeds = {"input_ids": PROMPT, **empty_cache(CONFIG)}
    streamed = list(generate_stream(model, context, feeds, runtime.GenerationOptions(max_new_tokens=6)))
    expected = onnxruntime_greedy(PROMPT, 6)[0, PROMPT.shape[1]:].tolist()
    assert [t[0] for t in streamed] == expected
    # Leaving the loop early stops the generation.
    stream = generate_stream(model, context, feeds, runtime.GenerationOptions(max_new_tokens=1000))
    first = next(stream)
    stream.close()
    assert first[0] == expected[0]


def test_asyncio_stream_and_cancellation(model):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    feeds = {"input_ids": PROMPT, **empty_cache(CONFIG)}

    async def collect(n):
        out = []
        async for tokens in aio.generate_stream(model, context, feeds,
                                                runtime.GenerationOptions(max_new_tokens=n)):
            out.append(tokens[0])
        return out

    async def cancel_after(k):
        # Cancelled by the k-th token event itself, never after a sleep: the outcome does not
        # depend on how fast the machine generates. A pending cancel ends the task cancelled
        # even if the stream could finish without suspending again.
        seen = []
        options = runtime.GenerationOptions(max_new_tokens=k + 40)  # within the 512 positions

        async def consume():
            async for tokens in aio.generate_stream(model, context, feeds, options):
                seen.append(tokens[0])
                if len(seen) == k:
                    asyncio.current_task().cancel()

        task = asyncio.ensure_future(consume())
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    expected = onnxruntime_greedy(PROMPT, 5)[0, PROMPT.shape[1]:].tolist()
    assert asyncio.run(collect(5)) == expected
    seen = asyncio.run(cancel_after(3))
    assert seen[:3] == expected[:3]
