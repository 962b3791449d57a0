"""`prepare --paged` (issue 15): an exported decoder's attention rewritten onto
ai.rt::PagedAttention with paged caches, checked against the original on onnxruntime.

The exports are the tests' own (tests/python/models/export_hf.py, torch.onnx dynamo, random
weights): the tiny Llama and GPT-2, and 2-layer versions of the SmolLM2-135M and Qwen2.5-0.5B
shapes. The rewritten models must give onnxruntime's greedy tokens on the original file and
its logits within 1e-4 (relative to the largest logit), for one paged cache per layer and for
row caches (a sequence of caches, one per batch row)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import onnxruntime as ort
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light import paged_rewrite, prepare
from onnx_light.onnx_py._onnxpykernels import runtime

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIZES = [("llama", "tiny"), ("gpt2", "tiny"), ("llama", "smollm2_2l"), ("qwen2", "qwen05_2l")]


def _raw_copy(tmp_path, arch, size):
    source = export_hf.ensure(arch, with_cache=True, size=size, raw=True)
    shutil.copy(source, tmp_path / "model.onnx")
    shutil.copy(source + ".data", tmp_path / os.path.basename(source + ".data"))
    return tmp_path / "model.onnx"


def _ort_greedy(path, ids, new_tokens):
    """onnxruntime on the original: greedy tokens and each step's last logits (a merged
    decoder's use_cache_branch False on the prompt, True after)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    merged = any(i.name == "use_cache_branch" for i in session.get_inputs())
    caches = {}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            dtype = np.float16 if i.type == "tensor(float16)" else np.float32
            caches[i.name] = np.zeros((ids.shape[0], i.shape[1], 0, i.shape[3]), dtype)
    step_ids, start, tokens, logits = ids, 0, [], []
    for _ in range(new_tokens):
        total = start + step_ids.shape[1]
        out = dict(zip(names, session.run(names, {
            "input_ids": step_ids, "attention_mask": np.ones((ids.shape[0], total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None].repeat(ids.shape[0], 0),
            **caches, **({"use_cache_branch": np.array([start > 0])} if merged else {})})))
        logits.append(out["logits"][:, -1])
        step_ids = out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(step_ids)
        caches = {p: out[p.replace("past_key_values.", "present.")] for p in caches}
        start = total
    return np.concatenate(tokens, axis=1), logits


@pytest.mark.parametrize("arch,size", SIZES, ids=[f"{a}-{s}" for a, s in SIZES])
def test_paged_rewrite_generates_onnxruntimes_tokens(tmp_path, arch, size):
    """One paged cache per layer: the report names every rewrite and the dropped mask input;
    runtime.generate from empty paged caches gives onnxruntime's greedy tokens."""
    original = _raw_copy(tmp_path, arch, size)
    report = prepare.prepare_decoder(original, tmp_path / "paged.onnx", bind="auto",
                                     paged="cache")
    layers = export_hf.cache_shape(arch, size)[0]
    assert report.pairs == [(f"past_key_values.{i}", f"present.{i}") for i in range(layers)]
    attention = [r for r in report.rewrites if r.op_type == "PagedAttention"]
    assert [r.input_name for r in attention] == [f"past_key_values.{i}" for i in range(layers)]
    assert any(r.op_type == "input" and r.node_name == "attention_mask" for r in report.rewrites)
    assert "logits equal onnx-light's on the original" in report.checks[-1]
    assert "and onnxruntime's within" in report.checks[-1]

    model = ol_onnx.load_model(tmp_path / "paged.onnx")
    assert sorted(n.op_type for n in model.graph.node if n.domain == "ai.rt") == \
        ["PagedAttention"] * layers
    assert not any(n.op_type == "Softmax" for n in model.graph.node)
    assert [i.name for i in model.graph.input][:2] == ["input_ids", "position_ids"]
    vocab = export_hf.vocab_size(arch, size)
    prompt = np.random.default_rng(7).integers(0, vocab, (1, 9), dtype=np.int64)
    expected, _ = _ort_greedy(original, prompt, 6)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    feeds = {"input_ids": prompt, **{f"past_key_values.{i}": {"blocks": []}
                                     for i in range(layers)}}
    got = np.from_dlpack(runtime.generate(model, context, feeds,
                                          runtime.GenerationOptions(max_new_tokens=6)))
    np.testing.assert_array_equal(got[:, prompt.shape[1]:], expected)


def test_row_caches_match_onnxruntime_for_rows_of_different_lengths(tmp_path):
    """paged='rows': each batch row keeps its own cache, so two requests of different prompt
    lengths run as one call per step (RunRows) and each row's logits equal onnxruntime's for
    that request alone, within 1e-4."""
    arch, size = "llama", "tiny"
    original = _raw_copy(tmp_path, arch, size)
    prepare.prepare_decoder(original, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(tmp_path / "rows.onnx")
    layers = export_hf.cache_shape(arch, size)[0]
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 128, (1, n), dtype=np.int64) for n in (5, 11)]
    alone = [_ort_greedy(original, p, 4) for p in prompts]
    session = model
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rows = [runtime.RowCaches({f"past_key_values.{i}": {"blocks": []} for i in range(layers)})
            for _ in prompts]
    # Prompts one row at a time (their lengths differ), then decode steps as one call.
    last = []
    for r, p in enumerate(prompts):
        out = runtime.run_rows(session, context, {
            "input_ids": p, "position_ids": np.arange(p.shape[1], dtype=np.int64)[None]},
            [rows[r]])
        last.append(np.from_dlpack(out["logits"])[0, -1].copy())
    for r, (tokens, logits) in enumerate(alone):
        np.testing.assert_allclose(last[r], logits[0][0], rtol=1e-4,
                                   atol=1e-4 * max(1.0, np.abs(logits[0]).max()))
    positions = [p.shape[1] for p in prompts]
    for step in range(1, 4):
        ids = np.array([[alone[r][0][0, step - 1]] for r in range(2)], np.int64)
        out = runtime.run_rows(session, context, {
            "input_ids": ids, "position_ids": np.array([[positions[0]], [positions[1]]])}, rows)
        logits = np.from_dlpack(out["logits"])[:, -1].copy()
        for r in range(2):
            expected = alone[r][1][step][0]
            np.testing.assert_allclose(logits[r], expected, rtol=1e-4,
                                       atol=1e-4 * max(1.0, np.abs(expected).max()))
        positions = [n + 1 for n in positions]


def test_a_rewrite_that_changes_the_logits_is_refused(tmp_path, monkeypatch):
    """The check is numeric: a rewrite that scales one layer's queries (as a wrong mask or
    scale would change the scores) is refused and nothing is written."""
    original = _raw_copy(tmp_path, "llama", "tiny")
    real = paged_rewrite.rewrite

    def off_by_a_scale(model, pairs, rows=False, max_tokens=4096, model_dir=None):
        layers = real(model, pairs, rows, max_tokens, model_dir)
        node = next(n for n in model.graph.node if n.op_type == "PagedAttention")
        model.graph.initializer.add(name="wrong_scale", data_type=1, float_data=[1.5])
        scaled = model.graph.node.add(op_type="Mul", name="wrong", input=[node.input[0],
                                                                          "wrong_scale"],
                                      output=["wrongly_scaled"])
        assert scaled.output[0] == "wrongly_scaled"
        node.input[0] = "wrongly_scaled"
        paged_rewrite._topological_sort(model.graph)
        return layers

    monkeypatch.setattr(paged_rewrite, "rewrite", off_by_a_scale)
    with pytest.raises(prepare.PrepareError,
                       match=r"the rewritten attention changes the logits at step 0 .*nothing "
                             r"written"):
        prepare.prepare_decoder(original, tmp_path / "bad.onnx", bind="auto", paged="cache")
    assert not os.path.exists(tmp_path / "bad.onnx")
    assert [f for f in os.listdir(tmp_path) if f.startswith(".")] == []  # no temporary left


def _left_windows(path):
    model = ol_onnx.load_model(path)
    return [next((a.i for a in n.attribute if a.name == "left_window_size"), None)
            for n in model.graph.node if n.op_type == "PagedAttention"]


@pytest.mark.parametrize("paged", ["cache", "rows"])
def test_a_sliding_window_longer_than_the_check_is_read_from_the_mask(tmp_path, paged):
    """Gemma 3 with a window of 100 keys on its first layer: the logits check (a 6-token
    prompt, 3 steps) never reaches it, so the rewrite reads each layer's window from the
    export's own mask at max_tokens keys. The sliding layer gets left_window_size 99, the
    global one none, and 120 tokens give onnxruntime's greedy tokens on the original (without
    the window they part from them once the cache passes 100 tokens)."""
    original = _raw_copy(tmp_path, "gemma3_text", "window100")
    report = prepare.prepare_decoder(original, tmp_path / "paged.onnx", bind="auto",
                                     paged=paged)
    assert _left_windows(tmp_path / "paged.onnx") == [99, None]
    assert "each query seeing the last 100 keys" in report.format()
    prompt = np.random.default_rng(5).integers(0, 256, (1, 104), dtype=np.int64)
    expected, _ = _ort_greedy(original, prompt, 16)
    model = ol_onnx.load_model(tmp_path / "paged.onnx")
    empty = [{"blocks": []}] if paged == "rows" else {"blocks": []}
    feeds = {"input_ids": prompt, **{f"past_key_values.{i}": empty for i in range(2)}}
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    got = np.from_dlpack(runtime.generate(model, context, feeds,
                                          runtime.GenerationOptions(max_new_tokens=16)))
    np.testing.assert_array_equal(got[:, prompt.shape[1]:], expected)


def test_a_mask_neither_causal_nor_sliding_is_refused(tmp_path):
    """The sliding layer's mask reversed along the keys lets the last query see the first 8
    keys: no PagedAttention window says that, so the rewrite is refused, naming the mask."""
    original = _raw_copy(tmp_path, "gemma3_text", "tiny")
    model = ol_onnx.load_model(original)
    producer = {o: n for n in model.graph.node for o in n.output}
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")  # layer 0's
    add = producer[softmax.input[0]]  # scores * scale + mask
    mask = next(x for x in add.input if producer[x].op_type != "Mul")
    for name, values in (("rev_starts", [-1]), ("rev_ends", [-(1 << 62)]), ("rev_axes", [-1]),
                         ("rev_steps", [-1])):
        model.graph.initializer.add(name=name, data_type=7, dims=[1], int64_data=values)
    model.graph.node.add(op_type="Slice", name="reverse_mask",
                         input=[mask, "rev_starts", "rev_ends", "rev_axes", "rev_steps"],
                         output=["reversed_mask"])
    add.input[list(add.input).index(mask)] = "reversed_mask"
    paged_rewrite._topological_sort(model.graph)
    ol_onnx.save_model(model, tmp_path / "reversed.onnx")
    with pytest.raises(prepare.PrepareError,
                       match=rf"the mask 'reversed_mask' of past_key_values.0's attention lets "
                             rf"a query at position 4095 see 8 keys that are not the last 8"):
        prepare.prepare_decoder(tmp_path / "reversed.onnx", tmp_path / "p.onnx", bind="auto",
                                paged="rows")
    assert not os.path.exists(tmp_path / "p.onnx")


def test_an_attention_of_another_form_is_refused_naming_it(tmp_path):
    """Softmax over another axis is not attention the rewrite knows: refused by structure."""
    original = _raw_copy(tmp_path, "llama", "tiny")
    model = ol_onnx.load_model(original)
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    next(a for a in softmax.attribute if a.name == "axis").i = 2
    ol_onnx.save_model(model, tmp_path / "other.onnx")
    with pytest.raises(prepare.PrepareError,
                       match=r"cannot rewrite the attention onto PagedAttention: MatMul node "
                             r"'.*' does not read Softmax\(axis=-1\) probabilities"):
        prepare.prepare_decoder(tmp_path / "other.onnx", tmp_path / "p.onnx", bind="auto",
                                paged="rows")


def test_cli_paged_rows(tmp_path):
    original = _raw_copy(tmp_path, "gpt2", "tiny")
    result = subprocess.run(
        [sys.executable, "-m", "onnx_light", "prepare", str(original), "-o",
         str(tmp_path / "rows.onnx"), "--bind", "auto", "--paged", "rows"],
        capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "PagedAttention 'past_key_values.0/paged_attention'" in result.stdout
    assert "on one paged cache per batch row" in result.stdout
    assert "logits equal onnx-light's on the original" in result.stdout
    assert "and onnxruntime's within" in result.stdout


def test_a_prepared_export_runs_batched_in_the_request_scheduler(tmp_path):
    """The path for the models users have (issue 15): the raw export, prepared with
    paged='rows', decoded by RequestScheduler in batched mode (one model call per step for
    the running requests), and every request gets exactly the tokens runtime.generate gives
    it alone, which are onnxruntime's greedy tokens on the original file."""
    arch, size = "llama", "tiny"
    original = _raw_copy(tmp_path, arch, size)
    prepare.prepare_decoder(original, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(tmp_path / "rows.onnx")
    layers = export_hf.cache_shape(arch, size)[0]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rng = np.random.default_rng(11)
    prompts = [rng.integers(0, 128, (1, n), dtype=np.int64) for n in (3, 9, 5, 14, 1, 7)]

    def feeds(prompt):
        return {"input_ids": prompt,
                **{f"past_key_values.{i}": [{"blocks": []}] for i in range(layers)}}

    stats = check_scheduled_as_alone(model, context, original, [feeds(p) for p in prompts],
                                     "batched")
    assert stats["max_batch_size"] > 1


def check_scheduled_as_alone(model, context, original, feeds, mode, new_tokens=6):
    """Each request of `feeds` (dicts with input_ids [1, n]) alone through runtime.generate gets
    onnxruntime's greedy tokens on `original`, and the same tokens through one RequestScheduler
    that runs them together in `mode`; returns the scheduler's stats."""
    options = runtime.GenerationOptions(max_new_tokens=new_tokens)
    alone = [np.from_dlpack(runtime.generate(model, context, f, options))[0].tolist()
             for f in feeds]
    for f, tokens in zip(feeds, alone):
        expected, _ = _ort_greedy(original, f["input_ids"], new_tokens)
        assert tokens[f["input_ids"].shape[1]:] == expected[0].tolist()
    scheduler = runtime.RequestScheduler(context, max_in_flight=len(feeds))
    # The first request waits at its first token until all are submitted, so they overlap.
    submitted = threading.Event()
    handles = [scheduler.submit(model, f, options,
                                on_token=(lambda s, t: submitted.wait(60)) if i == 0 else None)
               for i, f in enumerate(feeds)]
    submitted.set()
    scheduler.wait_idle()
    for handle, tokens in zip(handles, alone):
        assert np.from_dlpack(handle.result())[0].tolist() == tokens
        assert handle.stats()["mode"] == mode
    stats = scheduler.stats()
    assert stats["mode"] == mode
    return stats


def test_a_prepared_export_declares_its_page_layout_for_a_kv_budget_in_bytes(tmp_path):
    """The rewrite declares each paged cache's layout (blocks of start, length and FLOAT
    key/value [rows, kv_heads, capacity, head]), so max_kv_bytes knows a token's bytes:
    layers x (key + value) x kv_heads x head x 4, charged in whole pages of 16 tokens."""
    arch, size = "llama", "tiny"
    original = _raw_copy(tmp_path, arch, size)
    prepare.prepare_decoder(original, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(tmp_path / "rows.onnx")
    layers, kv_heads, head = export_hf.cache_shape(arch, size)
    name = f"ai.rt.PagedKvCache.{kv_heads}x{head}"
    assert [s.name for s in model.struct_types] == [name]
    past = next(i for i in model.graph.input if i.name == "past_key_values.0")
    assert past.type.sequence_type.elem_type.struct_type.type_ref == name
    per_token = layers * 2 * kv_heads * head * 4
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    options = runtime.GenerationOptions(max_new_tokens=6)  # 5 + 6 tokens: one page per row
    prompt = np.arange(1, 6, dtype=np.int64)[None]
    feeds = {"input_ids": prompt, **{f"past_key_values.{i}": [{"blocks": []}]
                                     for i in range(layers)}}
    scheduler = runtime.RequestScheduler(context, max_in_flight=2,
                                         max_kv_bytes=2 * 16 * per_token)
    handles = [scheduler.submit(model, feeds, options) for _ in range(2)]
    alone = np.from_dlpack(runtime.generate(model, context, feeds, options)).tolist()
    for handle in handles:
        assert np.from_dlpack(handle.result()).tolist() == alone
    scheduler.wait_idle()
    stats = scheduler.stats()
    assert stats["mode"] == "batched" and stats["kv_bytes_reserved"] == 0
    assert 16 * per_token <= stats["peak_kv_bytes_reserved"] <= 2 * 16 * per_token
    too_big = scheduler.submit(model, {**feeds, "input_ids": np.ones((1, 40), np.int64)}, options)
    with pytest.raises(MemoryError, match=rf"needs {48 * per_token} KV bytes"):
        too_big.result()


def test_a_fixed_page_format_policy_sets_what_a_kv_budget_in_bytes_charges(tmp_path):
    """register_paged_attention(PagedFormatPolicy(key, value)) from the first token: a token
    costs the policy's storage bytes (INT8: a quarter of FLOAT), so a budget of two INT8 pages
    a row runs two requests at once with the tokens each gives alone under that policy, and
    grow_and_preempt keeps INT8 caches within a tight budget by preempting, each request still
    giving its alone tokens. A policy that switches later (pages before it are FLOAT) or a
    callable is charged at the declared FLOAT layout."""
    arch, size = "llama", "tiny"
    original = _raw_copy(tmp_path, arch, size)
    prepare.prepare_decoder(original, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(tmp_path / "rows.onnx")
    layers, kv_heads, head = export_hf.cache_shape(arch, size)
    int8_per_token = layers * 2 * kv_heads * head
    caches = {f"past_key_values.{i}": [{"blocks": []}] for i in range(layers)}

    def run(policy, prompts, new_tokens, budget, **kw):
        """The requests at once under `budget`, and each one's tokens alone."""
        context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
        context.register_paged_attention(policy)
        options = runtime.GenerationOptions(max_new_tokens=new_tokens)
        scheduler = runtime.RequestScheduler(context, max_in_flight=len(prompts),
                                             max_kv_bytes=budget, **kw)
        submitted = threading.Event()  # the first request waits at its first token for all

        def hold(step, tokens):
            assert submitted.wait(timeout=60)

        handles = [scheduler.submit(model, {"input_ids": p, **caches}, options,
                                    on_token=hold if i == 0 else None)
                   for i, p in enumerate(prompts)]
        submitted.set()
        alone = [np.from_dlpack(runtime.generate(model, context, {"input_ids": p, **caches},
                                                 options)).tolist() for p in prompts]
        return handles, alone, scheduler

    def all_alone(handles, alone, scheduler):
        for handle, tokens in zip(handles, alone):
            assert np.from_dlpack(handle.result()).tolist() == tokens
        scheduler.wait_idle()
        return scheduler.stats()

    two = [np.arange(1, 6, dtype=np.int64)[None], np.arange(7, 12, dtype=np.int64)[None]]
    budget = 2 * 16 * int8_per_token  # 5 + 6 tokens: one page per row
    handles, alone, scheduler = run(runtime.PagedFormatPolicy("INT8", "INT8"), two, 6, budget)
    stats = all_alone(handles, alone, scheduler)
    assert stats["peak_kv_bytes_reserved"] == budget and stats["max_batch_size"] == 2
    assert [h.stats()["kv_bytes_per_token"] for h in handles] == [int8_per_token] * 2

    five = [np.array([[1 + i, 5, 9, 2 + i, 7]], np.int64) for i in range(5)]
    budget = 5 * 16 * int8_per_token  # one page each; 5 + 24 tokens need two each
    stats = all_alone(*run(runtime.PagedFormatPolicy("INT8", ("INT8", 0.02, 0)), five, 24, budget,
                           kv_admission="grow_and_preempt"))
    assert stats["preemptions"] > 0 and stats["peak_kv_bytes_reserved"] <= budget

    budget = 2 * 16 * int8_per_token
    for policy in (runtime.PagedFormatPolicy("INT8", "INT8", after_tokens=4),
                   lambda key, value, past: ("INT8", "INT8")):
        handles, _, _ = run(policy, two, 6, budget)
        with pytest.raises(MemoryError, match=rf"needs {16 * 4 * int8_per_token} KV bytes .* x "
                                              rf"{4 * int8_per_token} bytes per token\) but "
                                              rf"max_kv_bytes is {budget}"):
            handles[0].result()
