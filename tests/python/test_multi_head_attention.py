"""com.microsoft MultiHeadAttention against onnxruntime 1.32's CPU kernel: single-node models
(prompt and decode with past/present, causal and not, several head counts, attention_bias
broadcasts, cross attention), FLOAT within 1e-5 and FLOAT16 within HALF_TOL; caches bound in a
persistent state (FLOAT16 rows appended in place, no prefix byte copied); the refused inputs;
and the onnxruntime-genai builder's stock `-e cpu -p fp16` decoder (MultiHeadAttention +
RotaryEmbedding), whose greedy tokens equal onnxruntime's on the same file.

FLOAT16 tolerance: onnx-light widens Q/K/V to FLOAT, keeps scores and sums FLOAT and rounds the
output once; onnxruntime's FLOAT16 path rounds its scores and probabilities to FLOAT16 on the
way, so outputs (magnitude ~1) agree within 2e-3 absolute + 2e-3 relative (4 FLOAT16 ulps at
1). Presents are copies of the inputs: bit for bit."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from models import genai_builder
from test_append_capacity import pointer, take_storage
from test_contrib_ops import _run_both, _run_ours
from onnx_light import onnx as ol_onnx
from onnx_light.prepare import prepare_decoder
from onnx_light.onnx_py._onnxpykernels import runtime

F16 = np.float16
HALF_TOL = 2e-3
_INPUTS = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key",
           "past_value", "past_sequence_length", "cache_indirection"]
_ELEM = {np.float32: TensorProto.FLOAT, F16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
         np.int64: TensorProto.INT64}


def _mha(feeds, outputs=("out", "present_key", "present_value"), **attrs):
    """A one-node model over the given inputs (by their MultiHeadAttention names)."""
    ins = [n if n in feeds else "" for n in _INPUTS]
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("MultiHeadAttention", ins, list(outputs), domain="com.microsoft",
                            name="mha", **attrs)
    dtype = _ELEM[feeds["query"].dtype.type]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _ELEM[v.dtype.type], None) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, dtype, None) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _feeds(rng, dtype, batch=2, seq=3, heads=2, h=8, past=0, kv_seq=None, v_h=None, bias=None):
    kv_seq = seq if kv_seq is None else kv_seq
    v_h = h if v_h is None else v_h
    f = {"query": rng.standard_normal((batch, seq, heads * h)),
         "key": rng.standard_normal((batch, kv_seq, heads * h)),
         "value": rng.standard_normal((batch, kv_seq, heads * v_h))}
    if bias is not None:
        f["attention_bias"] = rng.standard_normal(
            (batch if bias[0] else 1, heads if bias[1] else 1, seq, past + kv_seq))
    if past:
        f["past_key"] = rng.standard_normal((batch, heads, past, h))
        f["past_value"] = rng.standard_normal((batch, heads, past, v_h))
    return {k: v.astype(dtype) for k, v in f.items()}


def _check(ours, theirs, dtype):
    for name, expected in theirs.items():
        got = ours[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        if name != "out":
            np.testing.assert_array_equal(got, expected)
        elif dtype == F16:
            np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                                       rtol=HALF_TOL, atol=HALF_TOL)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


CASES = {
    "prompt": {},
    "prompt_causal": {"causal": 1, "seq": 5, "heads": 4},
    "decode": {"seq": 1, "past": 9},
    "decode_causal_one_head": {"seq": 1, "past": 9, "heads": 1, "causal": 1},
    "subsequent_prompt_causal": {"seq": 4, "past": 6, "heads": 3, "causal": 1},
    "bias_full": {"seq": 4, "past": 5, "causal": 1, "bias": (1, 1)},
    "bias_per_head": {"seq": 1, "past": 7, "heads": 4, "bias": (0, 1)},
    "bias_per_batch": {"seq": 3, "bias": (1, 0)},
    "bias_broadcast_h64": {"seq": 2, "past": 30, "h": 64, "heads": 2, "bias": (0, 0)},
    "cross_longer_kv": {"seq": 2, "kv_seq": 6},
    "value_width": {"seq": 3, "v_h": 4, "heads": 2},
    "scale": {"seq": 2, "past": 3, "scale": 0.3},
    # 16 or more query rows: FLOAT takes the tiled path (causal rule and bias as one mask)
    "tiled_prompt_causal": {"causal": 1, "seq": 40, "heads": 3, "h": 16},
    "tiled_subsequent_causal_bias": {"seq": 20, "past": 7, "causal": 1, "bias": (1, 1), "h": 16},
    "tiled_cross_longer_kv": {"seq": 24, "kv_seq": 33, "h": 16},
    "tiled_bias_per_head_value_width": {"seq": 17, "heads": 4, "bias": (0, 1), "v_h": 8, "h": 16},
}


@pytest.mark.parametrize("dtype", [np.float32, F16], ids=["float", "float16"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnxruntime(case, dtype):
    cfg = dict(CASES[case])
    attrs = {"num_heads": cfg.get("heads", 2), "unidirectional": cfg.pop("causal", 0)}
    if "scale" in cfg:
        attrs["scale"] = cfg.pop("scale")
    rng = np.random.default_rng(sum(map(ord, case)))
    feeds = _feeds(rng, dtype, **cfg)
    outputs = ("out", "present_key", "present_value") if "past_key" in feeds else ("out",)
    model = _mha(feeds, outputs, **attrs)
    ours, theirs = _run_both(model, feeds)
    _check(ours, theirs, dtype)
    if "past_key" not in feeds and "v_h" not in cfg:  # and presents from an empty past
        feeds["past_key"] = np.zeros((feeds["query"].shape[0], attrs["num_heads"], 0,
                                      feeds["key"].shape[2] // attrs["num_heads"]), dtype)
        feeds["past_value"] = np.zeros(feeds["past_key"].shape[:3] + (
            feeds["value"].shape[2] // attrs["num_heads"],), dtype)
        model = _mha(feeds, ("out", "present_key", "present_value"), **attrs)
        ours, theirs = _run_both(model, feeds)
        _check(ours, theirs, dtype)


@pytest.mark.parametrize("dtype", [np.float32, F16], ids=["float", "float16"])
@pytest.mark.parametrize("heads", [1, 4])
def test_bound_caches_append_in_place_and_match_onnxruntime(dtype, heads):
    """Caches bound in a persistent state: each decode step appends one row per (batch, head)
    block into the reserved capacity (no allocation, no prefix byte copied, the cache keeps
    its address) and equals onnxruntime fed its own presents."""
    rng = np.random.default_rng(heads)
    batch, prompt, h = 2, 5, 16
    feeds = _feeds(rng, dtype, batch=batch, seq=prompt, heads=heads, h=h, past=1)
    initial = {n: np.zeros((batch, heads, 0, h), dtype) for n in ("past_key", "past_value")}
    model = _mha(feeds, num_heads=heads, unidirectional=1)
    ours = ol_onnx.from_onnx(model)
    for name in ("key", "value"):
        binding = ours.graph.persistent_bindings.add()
        binding.input_name = f"past_{name}"
        binding.output_name = f"present_{name}"
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=16)
    state = runtime.PersistentValueState(ours, initial, options=options)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    past, pointers = dict(initial), []
    row_bytes = np.dtype(dtype).itemsize * h * batch * heads * 2  # a row per block, K and V
    for step in range(6):
        seq = prompt if step == 0 else 1
        step_feeds = {n: rng.standard_normal((batch, seq, heads * h)).astype(dtype)
                      for n in ("query", "key", "value")}
        out = state.run(context, step_feeds)
        got = {k: np.asarray(v).copy() for k, v in out.items()}
        pointers.append(pointer(out["present_key"]))
        del out
        y, present_key, present_value = reference.run(None, {**step_feeds, **past})
        _check(got, {"out": y, "present_key": present_key, "present_value": present_value},
               dtype)
        past = {"past_key": present_key, "past_value": present_value}
        totals = take_storage(context)
        if step > 0:
            assert (totals["allocations"], totals["prefix_copied_bytes"],
                    totals["append_copied_bytes"]) == (0, 0, row_bytes), step
    assert len(set(pointers[1:])) == 1  # the decode steps kept the prompt's buffer


# key_padding_mask (INT32: key lengths [B], [B, total] or [B, S, total], 0 = padding) and the
# projection bias, against onnxruntime. Padding keys get mask_filter_value added (onnxruntime's
# rule); in a row whose every visible key is padding, the scores sit near -10000, where FLOAT
# rounds to ~5e-4 and the two kernels' orders of operations differ: those rows agree within
# 5e-4, every other row within 1e-5.
MASK_CASES = {
    "lengths": {"form": "lengths"},
    "lengths_causal": {"form": "lengths", "causal": 1},
    "keys": {"form": "keys"},
    "keys_causal_attention_bias": {"form": "keys", "causal": 1, "bias": (1, 1)},
    "rows": {"form": "rows", "heads": 3},
    "rows_causal_filter_value": {"form": "rows", "causal": 1, "filter": -50.0},
    "cross_keys": {"form": "keys", "kv_seq": 6},
    "projection_bias": {"form": None, "proj_bias": True, "causal": 1},
    "projection_bias_and_keys": {"form": "keys", "proj_bias": True, "v_h": 4},
    "tiled_lengths_causal": {"form": "lengths", "causal": 1, "seq": 20, "h": 16},
    "tiled_keys_attention_bias": {"form": "keys", "seq": 18, "bias": (0, 1), "h": 16},
    "tiled_rows_causal_projection_bias": {"form": "rows", "causal": 1, "seq": 17,
                                          "proj_bias": True, "h": 16},
}


def _padding_mask(rng, form, batch, seq, total):
    if form == "lengths":
        return np.array([total - 2, 0][:batch], np.int32)  # batch 1: every key is padding
    shape = (batch, total) if form == "keys" else (batch, seq, total)
    mask = rng.integers(0, 2, shape).astype(np.int32)
    mask[0, ..., 0] = 1  # batch 0: every row sees a real key
    mask[-1, ...] = 0  # the last batch all padding
    return mask


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_padding_mask_and_projection_bias_match_onnxruntime(case):
    cfg = dict(MASK_CASES[case])
    form, proj_bias = cfg.pop("form"), cfg.pop("proj_bias", False)
    attrs = {"num_heads": cfg.get("heads", 2), "unidirectional": cfg.pop("causal", 0)}
    if "filter" in cfg:
        attrs["mask_filter_value"] = cfg.pop("filter")
    rng = np.random.default_rng(sum(map(ord, case)))
    feeds = _feeds(rng, np.float32, **cfg)
    batch, seq = feeds["query"].shape[:2]
    total = feeds["key"].shape[1]
    if form is not None:
        feeds["key_padding_mask"] = _padding_mask(rng, form, batch, seq, total)
    if proj_bias:
        width = feeds["query"].shape[2] * 2 + feeds["value"].shape[2]
        feeds["bias"] = rng.standard_normal(width).astype(np.float32)
    model = _mha(feeds, ("out",), **attrs)
    ours, theirs = _run_both(model, feeds)
    got, expected = ours["out"], theirs["out"]
    assert got.shape == expected.shape
    if form is None:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        return
    all_padding = np.zeros((batch, seq), bool)  # rows whose visible keys are all padding
    for b in range(batch):
        for s in range(seq):
            visible = s + 1 if attrs["unidirectional"] and seq > 1 else total
            m = feeds["key_padding_mask"]
            keys = (np.arange(visible) < m[b]) if form == "lengths" else \
                (m[b, :visible] if form == "keys" else m[b, s, :visible]) != 0
            all_padding[b, s] = not keys.any()
    assert all_padding.any() and (~all_padding).any(), "the case covers both kinds of row"
    np.testing.assert_allclose(got[~all_padding], expected[~all_padding], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[all_padding], expected[all_padding], rtol=2e-3, atol=2e-3)


def _extra(feeds, name, value):
    feeds = dict(feeds)
    feeds[name] = value
    return feeds


def test_unsupported_inputs_outputs_and_shapes_are_refused_naming_them():
    rng = np.random.default_rng(3)
    base = _feeds(rng, np.float32, seq=2, past=2)
    refused = {
        "past_sequence_length": _extra(base, "past_sequence_length", np.array([2], np.int32)),
    }
    for name, feeds in refused.items():
        with pytest.raises(ValueError, match=f"mha.*input '{name}' is not supported"):
            _run_ours(_mha(feeds, num_heads=2), feeds)
    # onnxruntime 1.32's CPU kernel gives undefined values for a padding mask with a past
    padded = _extra(base, "key_padding_mask", np.ones((2, 4), np.int32))
    with pytest.raises(ValueError, match="mha.*'key_padding_mask' together with 'past_key' is "
                                         "not supported"):
        _run_ours(_mha(padded, num_heads=2), padded)
    prompt = _feeds(rng, np.float32, seq=3)
    for mask, what in [(np.ones((2, 4), np.int32), r"INT32 \[2, 4\] must be INT32 \[batch\]"),
                       (np.ones((2, 3), np.int64), r"INT64 \[2, 3\] must be INT32"),
                       (np.array([3, 4], np.int32), "key length 4 of batch 1 is outside"
                                                    r" \[0, 3\]")]:
        feeds = _extra(prompt, "key_padding_mask", mask)
        with pytest.raises(ValueError, match=f"mha.*input 'key_padding_mask'.*{what}"):
            _run_ours(_mha(feeds, ("out",), num_heads=2), feeds)
    wrong_bias = _extra(prompt, "bias", np.zeros(47, np.float32))
    with pytest.raises(ValueError, match=r"mha.*input 'bias' \[47\] must be FLOAT \[48\]"):
        _run_ours(_mha(wrong_bias, ("out",), num_heads=2), wrong_bias)
    half = {k: v.astype(F16) for k, v in prompt.items()}
    half["bias"] = np.zeros(48, F16)
    with pytest.raises(ValueError, match="mha.*input 'bias' is supported for FLOAT only"):
        _run_ours(_mha(half, ("out",), num_heads=2), half)
    with pytest.raises(ValueError, match="mha.*output 'qk' is not supported"):
        _run_ours(_mha(base, ("out", "present_key", "present_value", "qk"), num_heads=2), base)
    packed = {"query": base["query"]}
    with pytest.raises(ValueError, match="mha.*'key' and 'value' must be given"):
        _run_ours(_mha(packed, ("out",), num_heads=2), packed)
    cross = {"query": base["query"], "key": base["past_key"], "value": base["past_value"]}
    with pytest.raises(ValueError, match="mha.*'key' and 'value' must be 3-D"):
        _run_ours(_mha(cross, ("out",), num_heads=2), cross)
    bad_bias = _extra(base, "attention_bias", np.zeros((1, 1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="mha.*'attention_bias'.*total_sequence_length = 4"):
        _run_ours(_mha(bad_bias, num_heads=2), bad_bias)
    mixed = _extra(base, "past_key", base["past_key"].astype(F16))
    with pytest.raises(ValueError, match="mha.*'past_key'.*must be FLOAT.*the type of 'query'"):
        _run_ours(_mha(mixed, num_heads=2), mixed)


# ---- the builder's stock fp16 CPU decoder ------------------------------------------------

# MultiHeadAttention (no past: the builder concatenates the caches with Concat and repeats
# them per query head with Expand/Reshape/Transpose) after two com.microsoft RotaryEmbedding
# nodes; attention_bias is the causal + padding mask built from attention_mask.
FP16_OPS = {("", "Add"), ("", "Cast"), ("", "Concat"), ("", "Constant"), ("", "ConstantOfShape"),
            ("", "Equal"), ("", "Expand"), ("", "Gather"), ("", "Less"), ("", "MatMul"),
            ("", "Mul"), ("", "Range"), ("", "Reshape"), ("", "Shape"), ("", "Sigmoid"),
            ("", "SimplifiedLayerNormalization"), ("", "Slice"), ("", "Squeeze"), ("", "Sub"),
            ("", "Tile"), ("", "Transpose"), ("", "Unsqueeze"), ("", "Where"),
            ("com.microsoft", "MultiHeadAttention"), ("com.microsoft", "RotaryEmbedding"),
            ("com.microsoft", "SkipSimplifiedLayerNormalization")}


def _ort_fp16_greedy(path, prompt, pasts, cache, new_tokens):
    """onnxruntime's greedy tokens and each step's last logits on the builder's file, its
    presents fed back. onnxruntime refuses the file as written at the first decode step: the
    builder annotates the repeat_kv outputs after the cache Concat with the prompt's
    'sequence_length' (they hold total_sequence_length rows), so it is run without the
    value_info (onnxruntime then infers the shapes itself)."""
    full = onnx.load(path)
    del full.graph.value_info[:]
    session = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    ids, feeds_cache, tokens, logits = prompt, cache, [], []
    for _ in range(new_tokens):
        total = prompt.shape[1] + len(tokens)
        out = dict(zip(names, session.run(names, {
            "input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(total - ids.shape[1], total, dtype=np.int64)[None],
            **feeds_cache})))
        logits.append(out["logits"][0, -1].astype(np.float32))
        tokens.append(int(out["logits"][0, -1].argmax()))
        ids = np.array([[tokens[-1]]], np.int64)
        feeds_cache = {p.name: out[p.name.replace("past_key_values.", "present.")] for p in pasts}
    return tokens, logits


def test_builder_fp16_cpu_build_prepares_and_generates_onnxruntime_greedy_tokens():
    """The stock file: prepare answers the full Shape of past_key_values.0.key (whose head
    dimension is the symbolic 'kv_cache_dim') through the one Gather that reads it (the past
    length, attention_mask dim 1 - input_ids dim 1). The prepared model, its FLOAT16 caches
    bound, gives onnxruntime's greedy tokens on the same file, and each step's logits within
    HALF_TOL."""
    path = genai_builder.ensure("llama", "fp16")
    proto = onnx.load(path, load_external_data=False)
    assert {(n.domain, n.op_type) for n in proto.graph.node} == FP16_OPS
    pasts = [i for i in proto.graph.input if i.name.startswith("past_key_values.")]
    assert {p.type.tensor_type.elem_type for p in pasts} == {TensorProto.FLOAT16}
    assert {p.type.tensor_type.shape.dim[3].dim_param for p in pasts} == {"kv_cache_dim"}
    with open(os.path.join(os.path.dirname(path), "genai_config.json")) as f:
        head = json.load(f)["model"]["decoder"]["head_size"]
    cache = {p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0, head), F16)
             for p in pasts}
    prompt = np.random.default_rng(3).integers(3, 120, (1, 7), dtype=np.int64)
    new_tokens = 8
    expected, expected_logits = _ort_fp16_greedy(path, prompt, pasts, cache, new_tokens)

    prepared = os.path.join(os.path.dirname(path), "model.prepared-test.onnx")
    report = prepare_decoder(path, prepared, bind="auto")
    assert [(r.op_type, r.input_name, r.answer) for r in report.rewrites] == [
        ("Shape", "past_key_values.0.key",
         "Gather '/model/attn_mask_reformat/past_key_subgraph/Gather' <- "
         "attention_mask dim 1 - input_ids dim 1")]
    model = ol_onnx.load_model(prepared)
    os.remove(prepared)
    assert len(model.graph.persistent_bindings) == len(pasts)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    tokens = runtime.generate(model, context, {"input_ids": prompt, **cache},
                              runtime.GenerationOptions(max_new_tokens=new_tokens))
    assert np.asarray(tokens)[0, prompt.shape[1]:].tolist() == expected

    state = runtime.PersistentValueState(model, cache)
    ids = prompt
    for step in range(new_tokens):
        total = prompt.shape[1] + step
        out = state.run(context, {
            "input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(total - ids.shape[1], total, dtype=np.int64)[None]})
        np.testing.assert_allclose(np.from_dlpack(out["logits"])[0, -1].astype(np.float32),
                                   expected_logits[step], atol=HALF_TOL, rtol=HALF_TOL)
        del out
        ids = np.array([[expected[step]]], np.int64)
    state.close()
