"""The com.microsoft contrib operators that onnxruntime-genai's model builder writes for decoders
(ops/contrib/), one node at a time on random inputs, against onnxruntime running the same
model: SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, SkipLayerNormalization,
RotaryEmbedding, MatMulNBits (4 and 8 bits, block sizes 16..256, zero points absent, packed
or float, K not a multiple of the block) and GroupQueryAttention (prompt, decode, subsequent
prompt, packed QKV, rotary, local window, softcap, smooth softmax, ragged batches). Float
results agree within 1e-5 (relative to the magnitudes summed); unsupported attributes and
inputs raise errors naming the node and the attribute or input."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_light.onnx_py._onnxpykernels import runtime

MS = "com.microsoft"
F32 = TensorProto.FLOAT


def _model(node, inputs, outputs, initializers=()):
    """A one-node model: `inputs` are (name, TensorProto type) graph inputs."""
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info(n, F32, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid(MS, 1)])


def _run_both(model, feeds):
    """(onnx-light outputs, onnxruntime outputs) by output name."""
    names = [o.name for o in model.graph.output]
    ort_session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    theirs = dict(zip(names, ort_session.run(names, feeds)))
    return _run_ours(model, feeds), theirs


def _run_ours(model, feeds):
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    out = session.run(context, feeds)
    return {o.name: np.from_dlpack(out[o.name]).copy() for o in model.graph.output}


def _close(got, expected, scale=1.0, tol=1e-5):
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale)


def _types(feeds):
    kinds = {np.float32: F32, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
             np.uint8: TensorProto.UINT8}
    return [(k, kinds[v.dtype.type]) for k, v in feeds.items()]


# ---- layer norms -------------------------------------------------------------------------


@pytest.mark.parametrize("shape,axis", [((2, 3, 64), -1), ((5, 96), -1), ((1, 1, 576), 2),
                                        ((2, 4, 8), 1)])
def test_simplified_layer_norm_matches_onnxruntime_with_inv_std_var(shape, axis):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32) * 3
    gamma = rng.standard_normal(shape[axis:]).astype(np.float32)
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y", "inv"],
                            axis=axis, epsilon=1e-6, stash_type=1)
    ours, theirs = _run_both(_model(node, [("X", F32), ("scale", F32)], ["Y", "inv"]),
                             {"X": x, "scale": gamma})
    _close(ours["Y"], theirs["Y"], np.abs(theirs["Y"]).max())
    _close(ours["inv"], theirs["inv"])


def _skip_feeds(rng, shape, skip_shape, extra):
    h = shape[-1]
    feeds = {"input": rng.standard_normal(shape).astype(np.float32),
             "skip": rng.standard_normal(skip_shape).astype(np.float32),
             "gamma": rng.standard_normal(h).astype(np.float32)}
    for name in extra:
        feeds[name] = rng.standard_normal(h).astype(np.float32)
    return feeds


@pytest.mark.parametrize("shape,skip_shape", [((2, 5, 64), (2, 5, 64)), ((2, 5, 64), (5, 64)),
                                              ((1, 1, 896), (1, 1, 896)), ((3, 32), (3, 32))])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_simplified_layer_norm_matches_onnxruntime_with_the_sum_output(shape, skip_shape,
                                                                            with_bias):
    rng = np.random.default_rng(shape[-1] + len(skip_shape) + with_bias)
    feeds = _skip_feeds(rng, shape, skip_shape, ["bias"] if with_bias else [])
    node = helper.make_node("SkipSimplifiedLayerNormalization", list(feeds), ["Y", "", "", "S"],
                            domain=MS, epsilon=1e-6)
    ours, theirs = _run_both(_model(node, _types(feeds), ["Y", "S"]), feeds)
    _close(ours["Y"], theirs["Y"], np.abs(theirs["Y"]).max())
    _close(ours["S"], theirs["S"], np.abs(theirs["S"]).max())


@pytest.mark.parametrize("extra", [[], ["beta"], ["beta", "bias"]])
def test_skip_layer_norm_matches_onnxruntime(extra):
    rng = np.random.default_rng(len(extra))
    feeds = _skip_feeds(rng, (2, 7, 48), (2, 7, 48), extra)
    inputs = list(feeds) if extra != ["bias"] else list(feeds)
    node = helper.make_node("SkipLayerNormalization", inputs, ["Y", "", "", "S"], domain=MS,
                            epsilon=1e-5)
    ours, theirs = _run_both(_model(node, _types(feeds), ["Y", "S"]), feeds)
    _close(ours["Y"], theirs["Y"], np.abs(theirs["Y"]).max())
    _close(ours["S"], theirs["S"], np.abs(theirs["S"]).max())


def test_skip_layer_norm_mean_and_inv_std_var_outputs_match_numpy():
    """onnxruntime's CPU kernel does not write these two optional outputs: numpy is the
    reference (mean and 1/std of input + skip + bias over the last axis)."""
    rng = np.random.default_rng(5)
    feeds = _skip_feeds(rng, (2, 3, 32), (2, 3, 32), ["beta", "bias"])
    node = helper.make_node("SkipLayerNormalization", list(feeds), ["Y", "M", "I", "S"],
                            domain=MS, epsilon=1e-5)
    ours = _run_ours(_model(node, _types(feeds), ["Y", "M", "I", "S"]), feeds)
    s = feeds["input"] + feeds["skip"] + feeds["bias"]
    mean = s.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((s - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    _close(ours["M"], mean, 1.0)
    _close(ours["I"], inv)
    _close(ours["Y"], (s - mean) * inv * feeds["gamma"] + feeds["beta"], 10.0)


# ---- RotaryEmbedding ---------------------------------------------------------------------


def _caches(rng, positions, half):
    angles = rng.uniform(0, 6.3, (positions, half)).astype(np.float32)
    return np.cos(angles), np.sin(angles)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("pos_form", ["2d", "offset"])
def test_rotary_embedding_matches_onnxruntime(layout, interleaved, pos_form):
    rng = np.random.default_rng(interleaved * 3 + len(layout) + len(pos_form))
    b, s, n, h = 2, 5, 3, 16
    x = rng.standard_normal((b, s, n * h) if layout == "3d" else (b, n, s, h)).astype(np.float32)
    cos, sin = _caches(rng, 32, h // 2)
    pos = (rng.integers(0, 32, (b, s)) if pos_form == "2d" else np.array([7])).astype(np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            interleaved=interleaved)
    feeds = {"x": x, "pos": pos, "cos": cos, "sin": sin}
    ours, theirs = _run_both(_model(node, _types(feeds), ["y"]), feeds)
    _close(ours["y"], theirs["y"], 1.0)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_partial_rotation_matches_onnxruntime(interleaved):
    rng = np.random.default_rng(11 + interleaved)
    b, s, n, h, rot = 1, 4, 2, 32, 16
    x = rng.standard_normal((b, s, n * h)).astype(np.float32)
    cos, sin = _caches(rng, 8, rot // 2)
    pos = np.array([[0, 1, 2, 3]], np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            interleaved=interleaved, num_heads=n, rotary_embedding_dim=rot)
    feeds = {"x": x, "pos": pos, "cos": cos, "sin": sin}
    ours, theirs = _run_both(_model(node, _types(feeds), ["y"]), feeds)
    _close(ours["y"], theirs["y"], 1.0)


def test_rotary_embedding_refuses_packed_batching_and_positions_past_the_cache():
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            name="rope", is_packed_batching=1)
    feeds = {"x": np.zeros((1, 2, 16), np.float32), "pos": np.array([0], np.int64),
             "cos": np.ones((4, 8), np.float32), "sin": np.zeros((4, 8), np.float32)}
    with pytest.raises(NotImplementedError, match="rope.*is_packed_batching"):
        _run_ours(_model(node, _types(feeds), ["y"]), feeds)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            name="rope")
    feeds["pos"] = np.array([3], np.int64)  # positions 3 and 4 of a 4-row cache
    with pytest.raises(ValueError, match="rope.*position 4.*position_ids"):
        _run_ours(_model(node, _types(feeds), ["y"]), feeds)
