"""Greedy generation on Llama- and GPT-2-architecture decoders exported by torch.onnx.export
with a KV cache (tests/python/models/export_hf.py): with persistent_bindings (past <- present,
added here by name) onnx-light evaluates the prompt once then one token per step, from empty
caches, and produces exactly the tokens of (a) the same model without bindings (full growing
prefix), (b) the cacheless export and (c) onnxruntime driving the cache model step by step with
the present outputs fed back. attention_mask and position_ids are created and advanced by the
runtime; batch 2 uses a left-padded prompt."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx.reference import ReferenceEvaluator
from onnx_light.onnx_py._onnxpykernels import runtime

NEW_TOKENS = 12
ARCHS = ["llama", "gpt2"]


@pytest.fixture(scope="module", params=ARCHS)
def arch(request):
    return request.param


@pytest.fixture(scope="module")
def paths(arch):
    return export_hf.ensure(arch, with_cache=True), export_hf.ensure(arch, with_cache=False)


def bound_model(path: str, arch: str):
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape(arch)[0])
    return model


def prompt_and_mask(batch: int):
    """Batch 1: an unpadded prompt. Batch 2: row 1 left-padded by 3 (pad id 0)."""
    rng = np.random.default_rng(batch)
    ids = rng.integers(1, 128, size=(batch, 7), dtype=np.int64)
    mask = np.ones_like(ids)
    if batch == 2:
        ids[1, :3] = 0
        mask[1, :3] = 0
    return ids, mask


def onnxruntime_greedy(path: str, arch: str, ids: np.ndarray, mask: np.ndarray,
                       new_tokens: int) -> np.ndarray:
    """onnxruntime on the cache model: prompt once, then one token per call, each present.N.*
    output fed back as past_key_values.N.*; mask grows by one, positions continue per row."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pairs = export_hf.cache_names(export_hf.cache_shape(arch)[0])
    cache = export_hf.empty_cache(arch, ids.shape[0])
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
    step_ids, out = ids, [ids]
    for _ in range(new_tokens):
        result = dict(zip(names, session.run(None, {"input_ids": step_ids, "attention_mask": mask,
                                                    "position_ids": positions, **cache})))
        last = result["logits"][:, -1]
        # Exact token equality is only meaningful if no step is a near-tie (the runtimes'
        # logits differ by ~1e-7): the prompts are chosen so the top-2 gap stays >= 1e-4.
        top2 = np.sort(last, axis=-1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0]).min() >= 1e-4, "near-tie: choose another prompt"
        step_ids = last.argmax(-1)[:, None].astype(np.int64)
        cache = {past: result[present] for past, present in pairs}
        mask = np.concatenate([mask, np.ones_like(step_ids)], axis=1)
        positions = positions[:, -1:] + 1
        out.append(step_ids)
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize("batch", [1, 2])
def test_bound_generation_matches_unbound_and_onnxruntime(arch, paths, batch):
    kv_path, _ = paths
    ids, mask = prompt_and_mask(batch)
    feeds = {"input_ids": ids, **export_hf.empty_cache(arch, batch)}
    if batch == 2:
        feeds["attention_mask"] = mask
    before = {k: v.copy() for k, v in feeds.items()}

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    options = runtime.GenerationOptions(max_new_tokens=NEW_TOKENS)
    bound = np.from_dlpack(runtime.generate(bound_model(kv_path, arch), context, feeds, options))
    # Without bindings the empty caches are ordinary fixed inputs: every step evaluates the
    # full growing prefix.
    unbound = np.from_dlpack(runtime.generate(ol_onnx.load_model(kv_path), context, feeds, options))
    expected = onnxruntime_greedy(kv_path, arch, ids, mask, NEW_TOKENS)

    assert bound.dtype == np.int64 and bound.shape == (batch, ids.shape[1] + NEW_TOKENS)
    np.testing.assert_array_equal(bound[:, :ids.shape[1]], ids)
    np.testing.assert_array_equal(bound, expected)
    np.testing.assert_array_equal(unbound, expected)
    for name, value in before.items():  # caller feeds unchanged
        np.testing.assert_array_equal(feeds[name], value)


def test_cacheless_export_generates_the_same_tokens(arch, paths):
    kv_path, plain_path = paths
    ids, mask = prompt_and_mask(1)
    plain = ReferenceEvaluator(ol_onnx.load_model(plain_path)).generate(
        {"input_ids": ids}, max_new_tokens=NEW_TOKENS)
    np.testing.assert_array_equal(plain, onnxruntime_greedy(kv_path, arch, ids, mask, NEW_TOKENS))


def test_generation_rejects_a_non_empty_initial_cache(arch, paths):
    kv_path, _ = paths
    ids, _ = prompt_and_mask(1)
    layers, kv_heads, head_dim = export_hf.cache_shape(arch)
    feeds = {"input_ids": ids, **export_hf.empty_cache(arch)}
    feeds["past_key_values.0.key"] = np.zeros((1, kv_heads, 2, head_dim), np.float32)
    with pytest.raises(ValueError, match="past_key_values.0.key.*empty prefix"):
        ReferenceEvaluator(bound_model(kv_path, arch)).generate(feeds, max_new_tokens=2)


@pytest.mark.parametrize("batch", [1, 2])
def test_exported_caches_append_in_place_per_head(arch, paths, batch):
    """The exporters' `present = Concat(past, new)` on [batch, kv_heads, length, head_dim]
    caches: after the prompt step allocates each cache once, every decode step writes only
    the new row of each (batch, head) block: no prefix byte is copied and nothing is
    allocated, while the tokens stay those of onnxruntime."""
    kv_path, _ = paths
    layers, kv_heads, head_dim = export_hf.cache_shape(arch)
    ids, mask = prompt_and_mask(batch)
    feeds = {"input_ids": ids, **export_hf.empty_cache(arch, batch)}
    if batch == 2:
        feeds["attention_mask"] = mask
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    options = runtime.GenerationOptions(max_new_tokens=NEW_TOKENS)
    tokens = np.from_dlpack(runtime.generate(bound_model(kv_path, arch), context, feeds, options))
    np.testing.assert_array_equal(tokens, onnxruntime_greedy(kv_path, arch, ids, mask, NEW_TOKENS))

    storage = [e for e in context.events()
               if e.action == runtime.RuntimeEventAction.kPersistentStorage]
    caches = 2 * layers
    steps = NEW_TOKENS  # the prompt step, then one step per further token
    assert {e.op_type for e in storage} == {"Concat"}
    assert sum(e.storage_allocations for e in storage) == caches
    assert sum(e.storage_prefix_copied_bytes for e in storage) == 0
    assert sum(e.storage_reuse_count for e in storage) == caches * (steps - 1)
    row = batch * kv_heads * head_dim * 4  # one FLOAT token of one cache
    rows = ids.shape[1] + (steps - 1)
    assert sum(e.storage_append_copied_bytes for e in storage) == caches * rows * row
