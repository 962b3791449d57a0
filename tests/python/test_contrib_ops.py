"""The com.microsoft contrib operators that onnxruntime-genai's model builder writes for decoders
(ops/contrib/), one node at a time on random inputs, against onnxruntime running the same
model: SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, SkipLayerNormalization,
RotaryEmbedding, MatMulNBits (4 and 8 bits, block sizes 16..256, zero points absent, packed
or float, K not a multiple of the block, float and int8 activations, FLOAT or FLOAT16 T1),
GatherBlockQuantized
and GroupQueryAttention (prompt, decode, subsequent
prompt, packed QKV, rotary, local window, softcap, smooth softmax, ragged batches). Float
results agree within 1e-5 (relative to the magnitudes summed); unsupported attributes and
inputs raise errors naming the node and the attribute or input."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_light.onnx_py._onnxpykernels import runtime
from process_memory import mapped_rss_kb

MS = "com.microsoft"
F32 = TensorProto.FLOAT


def _model(node, inputs, outputs, initializers=(), out_type=F32):
    """A one-node model: `inputs` are (name, TensorProto type) graph inputs."""
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
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


def test_an_unsupported_contrib_op_names_itself_and_its_node():
    """A com.microsoft operator onnx-light has no kernel for (QuickGelu: the builder writes it
    for other architectures) fails at its first run naming the operator and the node, not
    deep inside a kernel; onnxruntime runs the same file."""
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.702,
                            name="/model/layers.0/mlp/act_fn/QuickGelu")
    model = _model(node, [("x", F32)], ["y"])
    x = np.linspace(-2, 2, 8).astype(np.float32)
    ort.InferenceSession(model.SerializeToString(),
                         providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with pytest.raises(NotImplementedError,
                       match=r"no kernel for com.microsoft::QuickGelu \(opset 1\) needed by node "
                             r"'/model/layers.0/mlp/act_fn/QuickGelu'"):
        _run_ours(model, {"x": x})


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
    node = helper.make_node("SkipLayerNormalization", list(feeds), ["Y", "", "", "S"], domain=MS,
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


def test_layer_norms_refuse_bad_attributes_and_shapes_naming_node_and_input():
    x = np.zeros((2, 8), np.float32)
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y"], name="norm",
                            stash_type=0)
    with pytest.raises(NotImplementedError, match="norm.*stash_type 0 is not supported"):
        _run_ours(_model(node, [("X", F32), ("scale", F32)], ["Y"]),
                  {"X": x, "scale": np.ones(8, np.float32)})
    node = helper.make_node("SimplifiedLayerNormalization", ["X", "scale"], ["Y"], name="norm")
    with pytest.raises(ValueError, match="norm.*input 'scale' of shape \\[4\\] does not broadcast"):
        _run_ours(_model(node, [("X", F32), ("scale", F32)], ["Y"]),
                  {"X": x, "scale": np.ones(4, np.float32)})
    feeds = {"input": np.zeros((2, 3, 8), np.float32), "skip": np.zeros((2, 1, 8), np.float32),
             "gamma": np.ones(8, np.float32)}
    node = helper.make_node("SkipSimplifiedLayerNormalization", list(feeds), ["Y"], domain=MS,
                            name="skipnorm")
    with pytest.raises(ValueError, match="skipnorm.*input 'skip' of shape \\[2, 1, 8\\]"):
        _run_ours(_model(node, _types(feeds), ["Y"]), feeds)


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


# ---- MatMulNBits -------------------------------------------------------------------------


def _quantized(rng, k, n, bits, block, zp_kind):
    """Random MatMulNBits operands and the float weight W[K, N] they encode."""
    k_blocks = -(-k // block)
    levels = 1 << bits
    q = rng.integers(0, levels, (n, k_blocks * block)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (n, k_blocks)).astype(np.float32)
    if zp_kind == "none":
        zp = np.full((n, k_blocks), levels // 2, np.float32)
    elif zp_kind == "uint8":
        zp = rng.integers(0, levels, (n, k_blocks)).astype(np.float32)
    else:
        zp = rng.uniform(0, levels - 1, (n, k_blocks)).astype(np.float32)
    w = (q.astype(np.float32) - np.repeat(zp, block, 1)) * np.repeat(scales, block, 1)
    if bits == 4:
        b = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    else:
        b = q
    inits = {"B": b.reshape(n, k_blocks, block * bits // 8), "scales": scales.reshape(-1)}
    if zp_kind == "uint8":
        z = zp.astype(np.uint8)
        if bits == 4:
            if k_blocks % 2:
                z = np.concatenate([z, np.zeros((n, 1), np.uint8)], 1)
            z = z[:, 0::2] | (z[:, 1::2] << 4)
        inits["zero_points"] = z.reshape(-1)
    elif zp_kind == "float":
        inits["zero_points"] = zp.reshape(-1)
    return inits, w[:, :k].T.copy()


def _nbits_model(k, n, bits, block, inits, bias=None, accuracy_level=0, name="mm"):
    inits = dict(inits)
    names = ["A", "B", "scales", "zero_points" if "zero_points" in inits else ""]
    if bias is not None:
        inits["bias"] = bias
        names += ["", "bias"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, name=name, K=k, N=n,
                            bits=bits, block_size=block, accuracy_level=accuracy_level)
    return _model(node, [("A", F32)], ["Y"], list(inits.items()))


# onnxruntime's CPU kernel refuses 8-bit weights with float zero points; this kernel runs
# them, checked against the reference only.
NBITS_CASES = [(bits, block, zp) for bits in (4, 8) for block in (16, 32, 64, 128, 256)
               for zp in ("none", "uint8", "float")]


@pytest.mark.parametrize("bits,block,zp", NBITS_CASES)
def test_mat_mul_n_bits_matches_the_dequantized_weight_and_onnxruntime(bits, block, zp):
    """Decode (M = 1), a few rows (GEMV per row) and a prompt (tiles into SGEMM), K not a
    multiple of the block, N not a multiple of 16; two runs each so that the kernel's
    repacked weight is reused. Against the float product with the dequantized weight the
    tolerance is float rounding; onnxruntime at accuracy_level 0 computes the same product."""
    rng = np.random.default_rng(bits * 1000 + block + len(zp))
    k, n = 3 * block - 5, 37
    inits, w = _quantized(rng, k, n, bits, block, zp)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _nbits_model(k, n, bits, block, inits, bias)
    with_ort = not (bits == 8 and zp == "float")
    ort_session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"]) if with_ort else None
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    for shape in [(1, 1, k), (3, k), (2, 19, k), (1, 1, k)]:
        a = rng.standard_normal(shape).astype(np.float32)
        ours = np.from_dlpack(session.run(context, {"A": a})["Y"]).copy()
        reference = (a.astype(np.float64) @ w.astype(np.float64) + bias).astype(np.float32)
        magnitude = np.abs(a) @ np.abs(w) + np.abs(bias)
        assert ours.shape == reference.shape
        assert np.all(np.abs(ours - reference) <= 2e-6 * magnitude + 1e-6), shape
        if with_ort:
            theirs = ort_session.run(None, {"A": a})[0]
            assert np.all(np.abs(ours - theirs) <= 4e-6 * magnitude + 1e-6), shape


@pytest.mark.parametrize("bits", [4, 8])
def test_mat_mul_n_bits_is_as_close_to_the_reference_as_onnxruntime_at_accuracy_level_4(bits):
    """At accuracy_level 4 onnxruntime quantizes A to int8 per block; this kernel stays in
    float, so its distance to the dequantized-weight reference is below onnxruntime's own."""
    rng = np.random.default_rng(40 + bits)
    k, n, block = 576, 96, 32
    inits, w = _quantized(rng, k, n, bits, block, "uint8")
    model = _nbits_model(k, n, bits, block, inits, accuracy_level=4)
    a = rng.standard_normal((1, 4, k)).astype(np.float32)
    ours, theirs = _run_both(model, {"A": a})
    reference = a.astype(np.float64) @ w.astype(np.float64)
    assert np.abs(ours["Y"] - reference).max() <= np.abs(theirs["Y"] - reference).max() + 1e-5


# onnxruntime's CPU kernel refuses 8-bit weights with float zero points (see NBITS_CASES).
@pytest.mark.parametrize("bits,zp", [(4, "none"), (4, "uint8"), (4, "float"), (8, "none"),
                                     (8, "uint8")])
def test_mat_mul_n_bits_takes_float16_activations_and_scales_as_onnxruntime(bits, zp):
    """T1 = FLOAT16: A, scales, float zero points, bias and Y in half precision. Both engines
    widen to float, so the results agree to half-precision rounding of Y."""
    rng = np.random.default_rng(160 + bits + len(zp))
    k, n, block = 80, 37, 32
    inits, w = _quantized(rng, k, n, bits, block, zp)
    inits = {name: v.astype(np.float16) if v.dtype == np.float32 else v
             for name, v in inits.items()}
    inits["bias"] = rng.standard_normal(n).astype(np.float16)
    names = ["A", "B", "scales", "zero_points" if "zero_points" in inits else "", "", "bias"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, name="mm", K=k, N=n,
                            bits=bits, block_size=block)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT16, None)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(v, name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    theirs_session = ort.InferenceSession(model.SerializeToString(),
                                          providers=["CPUExecutionProvider"])
    for shape in [(1, 1, k), (3, k), (2, 19, k), (1, 1, k)]:
        a = rng.standard_normal(shape).astype(np.float16)
        ours = np.from_dlpack(session.run(context, {"A": a})["Y"]).copy()
        theirs = theirs_session.run(None, {"A": a})[0]
        assert ours.dtype == np.float16 and ours.shape == theirs.shape
        scale = np.abs(theirs.astype(np.float32)).max()
        np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32),
                                   rtol=2e-3, atol=2e-3 * scale)


def _group_model(rng, bits, zp, dtype, level):
    """A [.., 96] read by five MatMulNBits: q, k, v (N = 40, 16, 200; one K, bits, block,
    level and zero-point kind: one group), one of another block size and one with a bias
    (each left alone). Returns (model, output names)."""
    k, block = 96, 32
    nodes, inits, outputs = [], [], []
    for name, n, blk, bias in [("q", 40, block, False), ("k", 16, block, False),
                               ("v", 200, block, False), ("other_block", 24, 16, False),
                               ("biased", 24, block, True)]:
        weights, _ = _quantized(rng, k, n, bits, blk, zp)
        weights = {key: v.astype(dtype) if v.dtype == np.float32 else v
                   for key, v in weights.items()}
        if bias:
            weights["bias"] = rng.standard_normal(n).astype(dtype)
        names = ["A"] + [f"{name}_{key}" if key in weights else ""
                         for key in ("B", "scales", "zero_points")]
        names += ["", f"{name}_bias"] if bias else []
        while names[-1] == "":
            names.pop()
        nodes.append(helper.make_node("MatMulNBits", names, [name], domain=MS, name=name, K=k,
                                      N=n, bits=bits, block_size=blk, accuracy_level=level))
        inits += [numpy_helper.from_array(v, f"{name}_{key}") for key, v in weights.items()]
        outputs.append(name)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else F32
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", elem, None)],
                              [helper.make_tensor_value_info(o, elem, None) for o in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    return model, outputs


@pytest.mark.parametrize("bits,zp", [(4, "none"), (4, "uint8"), (4, "float"), (8, "uint8")])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("level", [0, 4])
def test_mat_mul_n_bits_of_one_input_run_as_one_group_with_each_products_bits(bits, zp, dtype,
                                                                              level):
    """The plan groups the MatMulNBits of one A with one K, bits, block size, accuracy level
    and zero-point kind into one MatMulNBitsGroup (one pass over their packed columns side by
    side): each output has the bits of the separate product for a decode row and a few rows
    (the GEMVs compute each column alone) and agrees to float rounding on a prompt (the
    SGEMM's depth blocks follow the width), on the first call and on the packed weights
    after; the others stay apart."""
    model, outputs = _group_model(np.random.default_rng(bits + len(zp) + level), bits, zp,
                                  dtype, level)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    sessions = {fuse: runtime.RuntimeSession(model, runtime.RuntimeSessionOptions(
        fuse_subgraphs=fuse)) for fuse in (False, True)}
    rng = np.random.default_rng(7)
    for shape in [(1, 1, 96), (3, 96), (2, 19, 96), (1, 1, 96)]:
        a = rng.standard_normal(shape).astype(dtype)
        got = {}
        for fuse, session in sessions.items():
            before = len(context.events())
            out = session.run(context, {"A": a})
            got[fuse] = {o: np.from_dlpack(out[o]).copy() for o in outputs}
            kernels = [e.op_type for e in context.events()[before:]
                       if e.action == runtime.RuntimeEventAction.kKernel]
            assert sorted(kernels) == (["MatMulNBits"] * 2 + ["MatMulNBitsGroup"] if fuse
                                       else ["MatMulNBits"] * 5)
        rows = int(np.prod(shape[:-1]))
        for o in outputs:
            assert got[True][o].shape == shape[:-1] + (got[False][o].shape[-1],)
            if rows <= 4:
                np.testing.assert_array_equal(got[True][o], got[False][o], err_msg=o)
            else:
                ref = got[False][o].astype(np.float32)
                np.testing.assert_allclose(got[True][o].astype(np.float32), ref, rtol=0,
                                           atol=1e-5 * np.abs(ref).max(), err_msg=o)


def test_mat_mul_n_bits_refuses_scales_of_another_type_than_a():
    rng = np.random.default_rng(3)
    inits, _ = _quantized(rng, 32, 16, 4, 32, "none")
    model = _nbits_model(32, 16, 4, 32, inits)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    with pytest.raises(ValueError, match="mm.*input 'scales' must have A's type FLOAT16, got "
                                         "FLOAT"):
        _run_ours(model, {"A": np.zeros((1, 32), np.float16)})


def test_mat_mul_n_bits_refuses_g_idx_and_unsupported_attributes():
    rng = np.random.default_rng(0)
    inits, _ = _quantized(rng, 32, 16, 4, 32, "none")
    a = np.zeros((1, 32), np.float32)
    g_idx = np.zeros(32, np.int32)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "", "g_idx"], ["Y"], domain=MS,
                            name="proj", K=32, N=16, bits=4, block_size=32)
    model = _model(node, [("A", F32)], ["Y"], list(inits.items()) + [("g_idx", g_idx)])
    with pytest.raises(NotImplementedError, match="proj.*input 'g_idx' is not supported"):
        _run_ours(model, {"A": a})
    for attrs, message in [({"bits": 3}, "bits 3 is not supported"),
                           ({"block_size": 8}, "block_size 8 is not supported"),
                           ({"block_size": 48}, "block_size 48 is not supported")]:
        node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain=MS,
                                name="proj", **{"K": 32, "N": 16, "bits": 4, "block_size": 32,
                                                **attrs})
        with pytest.raises(NotImplementedError, match="proj.*" + message):
            _run_ours(_model(node, [("A", F32)], ["Y"], list(inits.items())), {"A": a})


def test_mat_mul_n_bits_counts_its_repacked_weight_once():
    rng = np.random.default_rng(1)
    k, n = 256, 64
    inits, w = _quantized(rng, k, n, 4, 32, "uint8")
    session = runtime.RuntimeSession(_nbits_model(k, n, 4, 32, inits))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    before = runtime.packed_weight_bytes()
    for _ in range(3):
        a = rng.standard_normal((1, k)).astype(np.float32)
        y = np.from_dlpack(session.run(context, {"A": a})["Y"])
        assert np.allclose(y, a @ w, rtol=1e-5, atol=1e-4)
    # 4-bit weights (K * N / 2 bytes) plus a scale and a scaled zero point per column-block.
    assert runtime.packed_weight_bytes() - before == k * n // 2 + 2 * 4 * n * (k // 32)


# ---- GatherBlockQuantized ----------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("with_zp", [False, True])
def test_gather_block_quantized_matches_onnxruntime(bits, with_zp):
    rng = np.random.default_rng(bits + with_zp)
    rows, cols, block = 50, 96, 32
    inits, _ = _quantized(rng, cols, rows, bits, block, "uint8" if with_zp else "none")
    data = inits["B"].reshape(rows, -1)
    names = ["data", "ids", "scales"] + (["zp"] if with_zp else [])
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain=MS, name="embed",
                            bits=bits, block_size=block, gather_axis=0, quantize_axis=1)
    init = [("data", data), ("scales", inits["scales"].reshape(rows, -1))]
    if with_zp:
        init.append(("zp", inits["zero_points"].reshape(rows, -1)))
    model = _model(node, [("ids", TensorProto.INT64)], ["Y"], init)
    ids = np.array([[3, 0, 49, 3], [7, -1, 20, 11]], np.int64)
    ours, theirs = _run_both(model, {"ids": ids})
    np.testing.assert_array_equal(ours["Y"], theirs["Y"])
    with pytest.raises(ValueError, match="embed.*index 50 of input 'indices'"):
        _run_ours(model, {"ids": np.array([[50]], np.int64)})


# ---- GroupQueryAttention -----------------------------------------------------------------


TYPES = {np.dtype(np.float32): F32, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64}


def _gqa(rng, *, batch=1, seq=4, past=0, nq=4, nkv=2, h=16, packed=False, rotary=False,
         interleaved=0, seqlens=None, total=None, past_capacity=None, dtype=np.float32,
         position_ids=None, attention_bias=None, head_sink=None, **attrs):
    """A GroupQueryAttention model and feeds; seqlens_k defaults to past + seq - 1. Float
    inputs are drawn in FLOAT and cast to `dtype`; position_ids, attention_bias and head_sink
    are given arrays (inputs 9, 10, 11)."""
    feeds = {}
    if packed:
        feeds["query"] = rng.standard_normal((batch, seq, (nq + 2 * nkv) * h)).astype(np.float32)
    else:
        feeds["query"] = rng.standard_normal((batch, seq, nq * h)).astype(np.float32)
        feeds["key"] = rng.standard_normal((batch, seq, nkv * h)).astype(np.float32)
        feeds["value"] = rng.standard_normal((batch, seq, nkv * h)).astype(np.float32)
    cap = past if past_capacity is None else past_capacity
    feeds["past_key"] = rng.standard_normal((batch, nkv, cap, h)).astype(np.float32)
    feeds["past_value"] = rng.standard_normal((batch, nkv, cap, h)).astype(np.float32)
    lens = [past + seq - 1] * batch if seqlens is None else seqlens
    feeds["seqlens_k"] = np.array(lens, np.int32)
    feeds["total_sequence_length"] = np.array(past + seq if total is None else total, np.int32)
    names = list(feeds) if not packed else ["query", "", "", *list(feeds)[1:]]
    optional = {}
    if rotary:
        optional["cos_cache"], optional["sin_cache"] = _caches(rng, 64, h // 2)
    optional.update(position_ids=position_ids, attention_bias=attention_bias, head_sink=head_sink)
    extra = [n for n in ("cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink")]
    while extra and optional.get(extra[-1]) is None:
        extra.pop()
    for name in extra:
        names.append(name if optional.get(name) is not None else "")
        if optional.get(name) is not None:
            feeds[name] = optional[name]
    feeds = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
    node = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"],
                            domain=MS, name="gqa", num_heads=nq, kv_num_heads=nkv,
                            do_rotary=int(rotary), rotary_interleaved=interleaved, **attrs)
    inputs = [(k, TYPES[v.dtype]) for k, v in feeds.items()]
    return _model(node, inputs, ["out", "present_key", "present_value"],
                  out_type=TYPES[np.dtype(dtype)]), feeds


def _check_gqa(model, feeds):
    ours, theirs = _run_both(model, feeds)
    for name in ("out", "present_key", "present_value"):
        _close(ours[name], theirs[name], 1.0)


GQA_CASES = {
    "prompt": {},
    "prompt_packed": {"packed": True},
    "prompt_rotary": {"rotary": True},
    "prompt_rotary_interleaved_packed": {"rotary": True, "interleaved": 1, "packed": True},
    "decode": {"seq": 1, "past": 9},
    "decode_packed_rotary": {"seq": 1, "past": 9, "packed": True, "rotary": True},
    "decode_batch2": {"seq": 1, "past": 6, "batch": 2, "rotary": True},
    "decode_mqa": {"seq": 1, "past": 5, "nq": 6, "nkv": 1, "h": 32},
    # Qwen2.5-0.5B's grouping (7 query heads per KV head: tasks of 3, 3 and 1 heads), h = 64.
    "decode_group7": {"seq": 1, "past": 70, "nq": 14, "nkv": 2, "h": 64},
    "subsequent_prompt": {"seq": 3, "past": 5, "rotary": True},
    "local_window": {"seq": 1, "past": 12, "local_window_size": 4},
    "local_window_prompt": {"seq": 9, "local_window_size": 3},
    "softcap": {"seq": 3, "past": 5, "softcap": 2.5},
    "smooth_softmax": {"seq": 1, "past": 7, "smooth_softmax": 1},
    "smooth_softmax_schema_default": {"seq": 1, "past": 7, "smooth_softmax": -1},  # off
    "scale": {"seq": 2, "past": 3, "scale": 0.3},
    "ragged_decode": {"seq": 1, "past": 8, "batch": 2, "seqlens": [8, 5], "rotary": True},
    "capacity_past": {"seq": 1, "past": 6, "past_capacity": 10, "total": 7},
    # A padded row of a first prompt is rotated at its own position s (onnxruntime 1.32).
    "ragged_prompt_rotary": {"seq": 4, "batch": 2, "seqlens": [3, 1], "rotary": True},
}


@pytest.mark.parametrize("case", list(GQA_CASES))
def test_group_query_attention_matches_onnxruntime(case):
    rng = np.random.default_rng(sum(map(ord, case)))
    _check_gqa(*_gqa(rng, **GQA_CASES[case]))


def test_group_query_attention_refuses_seqlens_past_the_cache():
    rng = np.random.default_rng(2)
    model, feeds = _gqa(rng, seq=1, past=3)
    feeds["seqlens_k"] = np.array([7], np.int32)  # past 7 > the 3 rows of past_key
    with pytest.raises(ValueError, match="gqa.*seqlens_k"):
        _run_ours(model, feeds)


def test_group_query_attention_refuses_the_qk_output_naming_the_node():
    """The attention scores as an output (qk_output attribute, fourth output 'output_qk'):
    not implemented, refused naming the node rather than leaving the output unwritten."""
    rng = np.random.default_rng(5)
    model, feeds = _gqa(rng, seq=1, past=3, qk_output=1)
    with pytest.raises(NotImplementedError, match="gqa.*qk_output is not supported"):
        _run_ours(model, feeds)
    model, feeds = _gqa(rng, seq=1, past=3)
    model.graph.node[0].output.append("output_qk")
    model.graph.output.append(helper.make_tensor_value_info("output_qk", F32, None))
    with pytest.raises(NotImplementedError, match="gqa.*output 'output_qk' is not supported"):
        _run_ours(model, feeds)


@pytest.mark.parametrize("grouped", [False, True])
def test_mat_mul_n_bits_releases_the_files_pages_of_the_weights_it_packed(tmp_path, grouped):
    """A constant MatMulNBits weight from external data is repacked once; then the pages of
    the file's 4-bit weights go back to the page cache (the process does not hold both), and
    the next calls give the same results from the pack. Alone and in a MatMulNBitsGroup."""
    import onnx

    rng = np.random.default_rng(11)
    k, n, block = 2048, 512, 32  # 512 KiB of 4-bit weights a product
    nodes, inits, outputs = [], [], []
    for name in ("q", "k") if grouped else ("q",):
        weights, _ = _quantized(rng, k, n, 4, block, "none")
        nodes.append(helper.make_node("MatMulNBits", ["A", f"{name}_B", f"{name}_scales"],
                                      [name], domain=MS, name=name, K=k, N=n, bits=4,
                                      block_size=block))
        inits += [numpy_helper.from_array(weights["B"], f"{name}_B"),
                  numpy_helper.from_array(weights["scales"], f"{name}_scales")]
        outputs.append(name)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", F32, None)],
                              [helper.make_tensor_value_info(o, F32, None) for o in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    path = str(tmp_path / "model.onnx")
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    data = str(tmp_path / "model.onnx.data")
    from onnx_light import onnx as ol_onnx

    session = runtime.RuntimeSession(ol_onnx.load_model(path))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    a = rng.standard_normal((1, k)).astype(np.float32)
    results = []
    for _ in range(3):
        out = session.run(context, {"A": a})
        results.append({o: np.from_dlpack(out[o]).copy() for o in outputs})
    kernels = {e.op_type for e in context.events()
               if e.action == runtime.RuntimeEventAction.kKernel}
    assert ("MatMulNBitsGroup" in kernels) == grouped
    for later in results[1:]:
        for o in outputs:
            np.testing.assert_array_equal(later[o], results[0][o])
    # The weights: 256 KiB a product in the file; what stays resident is at most a few pages
    # at the edges of the ranges (whole pages inside a range are released).
    assert mapped_rss_kb(data) <= 16 * len(outputs), mapped_rss_kb(data)
    del session
