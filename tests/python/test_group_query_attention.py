"""com.microsoft GroupQueryAttention beyond single FLOAT calls (those are in
test_contrib_ops.py): FLOAT16 against onnxruntime 1.32's FLOAT16 CPU kernel, FLOAT and FLOAT16
caches bound in a persistent state (rows appended in place, no prefix byte copied), BFLOAT16
against onnxruntime's FLOAT kernel on the same bfloat16 values, and the position_ids,
attention_bias and head_sink inputs against onnxruntime (FLOAT within 1e-5).

FLOAT16 tolerance: onnxruntime widens Q/K/V to FLOAT, computes in FLOAT and rounds the output
once, as onnx-light does; the two differ by the order of FLOAT sums and by onnxruntime rounding
the rotated query to FLOAT16 (onnx-light keeps it FLOAT), so outputs (magnitude ~1) agree
within 2e-3 absolute + 2e-3 relative (4 FLOAT16 ulps at 1), rotated keys within one FLOAT16
ulp (rtol 1e-3) and unrotated keys and values bit for bit. BFLOAT16 (8-bit significand):
outputs within 2e-2."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from test_append_capacity import pointer, take_storage
from test_contrib_ops import _close, _gqa, _run_both, _run_ours
from onnx_light.onnx_py._onnxpykernels import runtime

F16 = np.float16
HALF_TOL = 2e-3


def _check_half(ours, theirs, rotary):
    for name in ("out", "present_key", "present_value"):
        assert ours[name].dtype == np.float16, (name, ours[name].dtype)
    np.testing.assert_allclose(ours["out"].astype(np.float32), theirs["out"].astype(np.float32),
                               rtol=HALF_TOL, atol=HALF_TOL)
    if rotary:
        np.testing.assert_allclose(ours["present_key"].astype(np.float32),
                                   theirs["present_key"].astype(np.float32), rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_array_equal(ours["present_key"], theirs["present_key"])
    np.testing.assert_array_equal(ours["present_value"], theirs["present_value"])


HALF_CASES = {
    "prompt": {},
    "prompt_packed_rotary": {"packed": True, "rotary": True},
    "decode": {"seq": 1, "past": 9},
    "decode_rotary_interleaved": {"seq": 1, "past": 9, "rotary": True, "interleaved": 1},
    "decode_mha": {"seq": 1, "past": 7, "nq": 2, "nkv": 2},
    "decode_group4": {"seq": 1, "past": 7, "nq": 8, "nkv": 2, "packed": True},
    "decode_group7": {"seq": 1, "past": 60, "nq": 14, "nkv": 2, "h": 64, "rotary": True},
    "subsequent_prompt": {"seq": 3, "past": 5, "rotary": True},
    "local_window": {"seq": 1, "past": 12, "local_window_size": 4},
    "softcap": {"seq": 3, "past": 5, "softcap": 2.5},
    "ragged_decode": {"seq": 1, "past": 8, "batch": 2, "seqlens": [8, 5], "rotary": True},
    "capacity_past": {"seq": 1, "past": 6, "past_capacity": 10, "total": 7},
    "position_ids": {"seq": 1, "past": 6, "batch": 2, "rotary": True,
                     "position_ids": np.array([[30], [2]], np.int64)},
}


@pytest.mark.parametrize("case", list(HALF_CASES))
def test_float16_matches_onnxruntime(case):
    rng = np.random.default_rng(sum(map(ord, case)))
    model, feeds = _gqa(rng, dtype=F16, **HALF_CASES[case])
    ours, theirs = _run_both(model, feeds)
    _check_half(ours, theirs, HALF_CASES[case].get("rotary", False))


def test_float16_bias_and_sink_match_onnxruntime():
    rng = np.random.default_rng(5)
    bias = rng.standard_normal((1, 4, 1, 10)).astype(np.float32)
    sink = rng.standard_normal(4).astype(np.float32)
    model, feeds = _gqa(rng, seq=1, past=9, rotary=True, dtype=F16, attention_bias=bias,
                        head_sink=sink)
    ours, theirs = _run_both(model, feeds)
    _check_half(ours, theirs, True)


def _check_bound_step(got, theirs, dtype, rotary):
    if dtype == F16:
        _check_half(got, theirs, rotary)
        return
    _close(got["out"], theirs["out"], 1.0)
    _close(got["present_key"], theirs["present_key"], 1.0)  # rotated keys: rounding of the rotation
    np.testing.assert_array_equal(got["present_value"], theirs["present_value"])


BOUND_CASES = {
    "packed_rotary_group2": {"packed": True, "rotary": True, "nq": 4, "nkv": 2},
    "mha_local_window": {"nq": 2, "nkv": 2, "local_window_size": 5},
    "group4_softcap_rotary": {"nq": 8, "nkv": 2, "softcap": 3.0, "rotary": True},
    "group7_h64": {"nq": 14, "nkv": 2, "h": 64, "packed": True},
}


@pytest.mark.parametrize("dtype", [np.float32, F16], ids=["float", "float16"])
@pytest.mark.parametrize("case", list(BOUND_CASES))
def test_bound_caches_append_in_place_and_match_onnxruntime(case, dtype):
    """Caches bound in a persistent state (FLOAT, or FLOAT16 kept 16-bit): each decode step
    appends one row per (batch, kv head) block into the reserved capacity (no allocation, no
    prefix byte copied, the cache keeps its address) and equals onnxruntime's kernel of the
    same type fed its own presents."""
    from onnx_light import onnx as ol_onnx

    cfg = dict(BOUND_CASES[case])
    rng = np.random.default_rng(sum(map(ord, case)))
    batch, prompt, h = 2, 5, cfg.pop("h", 16)
    nq, nkv, packed = cfg["nq"], cfg["nkv"], cfg.get("packed", False)
    model, feeds = _gqa(rng, batch=batch, seq=prompt, h=h, dtype=dtype, **cfg)
    ours = ol_onnx.from_onnx(model)
    for name in ("key", "value"):
        binding = ours.graph.persistent_bindings.add()
        binding.input_name = f"past_{name}"
        binding.output_name = f"present_{name}"
    initial = {"past_key": feeds.pop("past_key"), "past_value": feeds.pop("past_value")}
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=16)
    state = runtime.PersistentValueState(ours, initial, options=options)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    past, pointers = dict(initial), []
    row_bytes = np.dtype(dtype).itemsize * h * batch * nkv * 2  # a row per block, K and V
    widths = {"query": (nq + 2 * nkv) * h if packed else nq * h, "key": nkv * h, "value": nkv * h}
    for step in range(6):
        total = prompt + step
        step_feeds = {**feeds, "seqlens_k": np.full(batch, total - 1, np.int32),
                      "total_sequence_length": np.array(total, np.int32)}
        if step > 0:
            for name in [n for n in widths if n in feeds]:
                step_feeds[name] = rng.standard_normal((batch, 1, widths[name])).astype(dtype)
        out = state.run(context, step_feeds)
        got = {k: np.asarray(v).copy() for k, v in out.items()}
        pointers.append(pointer(out["present_key"]))
        del out
        y, present_key, present_value = reference.run(None, {**step_feeds, **past})
        theirs = {"out": y, "present_key": present_key, "present_value": present_value}
        _check_bound_step(got, theirs, dtype, cfg.get("rotary", False))
        past = {"past_key": present_key, "past_value": present_value}
        totals = take_storage(context)
        if step > 0:
            assert (totals["allocations"], totals["prefix_copied_bytes"],
                    totals["append_copied_bytes"]) == (0, 0, row_bytes), step
    assert len(set(pointers[1:])) == 1  # the decode steps kept the prompt's buffer


def test_bfloat16_matches_onnxruntime_float_on_the_same_values():
    """onnxruntime has no BFLOAT16 GroupQueryAttention on CPU: its FLOAT kernel on the
    bfloat16 values is the reference. The model casts the BFLOAT16 outputs to FLOAT."""
    rng = np.random.default_rng(11)
    model, feeds = _gqa(rng, seq=1, past=9, rotary=True, packed=True, nq=8, nkv=2)
    feeds = {k: v.astype(ml_dtypes.bfloat16).astype(np.float32) if v.dtype == np.float32 else v
             for k, v in feeds.items()}
    theirs = dict(zip(("out", "present_key", "present_value"),
                      ort.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"]).run(None, feeds)))
    graph = model.graph
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.BFLOAT16
    node_outputs = list(graph.node[0].output)
    graph.node[0].output[:] = [n + "_bf16" for n in node_outputs]
    for n in node_outputs:
        graph.node.append(helper.make_node("Cast", [n + "_bf16"], [n], to=TensorProto.FLOAT))
    bf16_feeds = {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v
                  for k, v in feeds.items()}
    ours = _run_ours(model, bf16_feeds)
    _close(ours["out"], theirs["out"], 1.0, tol=2e-2)
    _close(ours["present_key"], theirs["present_key"], 1.0, tol=1e-2)  # rounded after rotation
    np.testing.assert_array_equal(ours["present_value"], theirs["present_value"])


# ---- position_ids, attention_bias, head_sink (FLOAT, 1e-5 against onnxruntime) ----------


def _check(model, feeds):
    ours, theirs = _run_both(model, feeds)
    for name in ("out", "present_key", "present_value"):
        _close(ours[name], theirs[name], 1.0)


def _positions(rows):
    return np.array(rows, np.int64)


EXTRA_CASES = {
    # First prompt: position_ids[0] is the base position of every batch.
    "positions_prompt": {"seq": 4, "batch": 2, "rotary": True,
                         "position_ids": _positions([[7, 8, 9, 10], [0, 0, 0, 0]])},
    "positions_decode": {"seq": 1, "past": 6, "batch": 2, "rotary": True, "packed": True,
                         "position_ids": _positions([[3], [40]])},
    "positions_subsequent": {"seq": 3, "past": 5, "rotary": True, "interleaved": 1,
                             "position_ids": _positions([[20, 22, 24]])},
    "positions_without_rotary": {"seq": 1, "past": 4, "position_ids": _positions([[50]])},
    "bias_broadcast": {"seq": 1, "past": 7, "batch": 2, "bias": (1, 1, 1, 8)},
    "bias_per_batch_head": {"seq": 1, "past": 4, "batch": 2, "bias": (2, 4, 1, 5)},
    "bias_subsequent_prompt": {"seq": 3, "past": 4, "bias": (1, 4, 3, 7), "rotary": True},
    "bias_prompt_softcap": {"seq": 5, "bias": (1, 4, 5, 5), "softcap": 2.0},
    "bias_local_window": {"seq": 1, "past": 12, "bias": (1, 4, 1, 13), "local_window_size": 4},
    "bias_ragged": {"seq": 1, "past": 8, "batch": 2, "seqlens": [8, 5], "bias": (2, 1, 1, 9)},
    "sink": {"seq": 1, "past": 9, "sink": True},
    "sink_prompt_local_window": {"seq": 6, "sink": True, "local_window_size": 3},
    "sink_and_smooth_softmax": {"seq": 1, "past": 5, "sink": True, "smooth_softmax": 1},
    "all_three_group4": {"seq": 1, "past": 9, "nq": 8, "nkv": 2, "rotary": True, "sink": True,
                         "bias": (1, 8, 1, 10), "position_ids": _positions([[30]])},
}


@pytest.mark.parametrize("case", list(EXTRA_CASES))
def test_position_ids_bias_and_sink_match_onnxruntime(case):
    cfg = dict(EXTRA_CASES[case])
    rng = np.random.default_rng(sum(map(ord, case)))
    if "bias" in cfg:
        cfg["attention_bias"] = rng.standard_normal(cfg.pop("bias")).astype(np.float32)
    if cfg.pop("sink", False):
        cfg["head_sink"] = rng.standard_normal(cfg.get("nq", 4)).astype(np.float32)
    _check(*_gqa(rng, **cfg))


# Decode steps over long caches (up to 1101 keys): one task (batch 1, one KV head, 3 query
# heads) reading many keys, where a key-range split (flash-decoding) would apply.
LONG_CASES = {
    "long": {"past": 1100},
    "sink_bias_softcap": {"past": 900, "sink": True, "bias": (1, 3, 1, 901), "softcap": 4.0},
    "local_window": {"past": 1100, "local_window_size": 700},
    "smooth_softmax": {"past": 600, "smooth_softmax": 1},
    # batch 2: the second row has a single key.
    "ragged_empty_chunk": {"past": 1100, "batch": 2, "seqlens": [1100, 0]},
}


@pytest.mark.parametrize("dtype", [np.float32, F16], ids=["float", "float16"])
@pytest.mark.parametrize("case", list(LONG_CASES))
def test_long_cache_decode_matches_onnxruntime(case, dtype):
    cfg = dict(LONG_CASES[case], seq=1, nq=3, nkv=1, h=32)
    rng = np.random.default_rng(sum(map(ord, case)))
    if "bias" in cfg:
        cfg["attention_bias"] = rng.standard_normal(cfg.pop("bias")).astype(np.float32)
    if cfg.pop("sink", False):
        cfg["head_sink"] = rng.standard_normal(3).astype(np.float32)
    model, feeds = _gqa(rng, dtype=dtype, **cfg)
    ours, theirs = _run_both(model, feeds)
    if dtype == F16:
        _check_half(ours, theirs, False)
    else:
        for name in ("out", "present_key", "present_value"):
            _close(ours[name], theirs[name], 1.0)


def _both_refuse(model, feeds, pattern):
    """onnxruntime refuses the feeds too; onnx-light names the node and the input."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception):
        session.run(None, feeds)
    with pytest.raises(ValueError, match=pattern):
        _run_ours(model, feeds)


def test_bad_position_ids_bias_and_sink_are_refused_like_onnxruntime():
    rng = np.random.default_rng(4)
    base = {"seq": 1, "past": 3, "rotary": True}
    # Positions outside the 64 rows of the cos/sin caches (decode, and a first prompt's base).
    model, feeds = _gqa(rng, **base, position_ids=_positions([[64]]))
    _both_refuse(model, feeds, "gqa.*rotary position 64.*'position_ids'.*64 rows of 'cos_cache'")
    model, feeds = _gqa(rng, seq=4, rotary=True, position_ids=_positions([[61, 0, 0, 0]]))
    _both_refuse(model, feeds, "gqa.*rotary position 64.*'position_ids'")
    model, feeds = _gqa(rng, **base, position_ids=_positions([[1], [2]]))  # batch is 1
    _both_refuse(model, feeds, "gqa.*input 'position_ids' \\[2, 1\\] must be INT64 \\[batch, "
                               "sequence_length\\] = \\[1, 1\\]")
    bias = np.zeros((1, 1, 1, 5), np.float32)  # total_sequence_length is 4
    model, feeds = _gqa(rng, **base, attention_bias=bias)
    _both_refuse(model, feeds, "gqa.*input 'attention_bias' \\[1, 1, 1, 5\\] must be FLOAT .*"
                               "total_sequence_length = 4")
    model, feeds = _gqa(rng, **base, attention_bias=np.zeros((1, 2, 1, 4), np.float32))
    _both_refuse(model, feeds, "gqa.*input 'attention_bias' \\[1, 2, 1, 4\\].*num_heads or 1")
    model, feeds = _gqa(rng, **base, head_sink=np.zeros(5, np.float32))
    _both_refuse(model, feeds, "gqa.*input 'head_sink' \\[5\\] must be FLOAT \\[num_heads = 4\\]")


def test_mixed_types_and_quantized_cache_inputs_are_refused_naming_the_input():
    rng = np.random.default_rng(6)
    model, feeds = _gqa(rng, seq=1, past=3, dtype=F16)
    feeds["past_key"] = feeds["past_key"].astype(np.float32)
    model.graph.input[3].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(ValueError, match="gqa.*'past_key'.*must be FLOAT16.*the type of 'query'"):
        _run_ours(model, feeds)
    model, feeds = _gqa(rng, seq=1, past=3)
    model.graph.node[0].input.extend(["", "", "", "", "", "k_scale"])
    feeds["k_scale"] = np.ones(1, np.float32)
    model.graph.input.append(helper.make_tensor_value_info("k_scale", TensorProto.FLOAT, None))
    with pytest.raises(NotImplementedError, match="gqa.*input 'k_scale' is not supported"):
        _run_ours(model, feeds)
