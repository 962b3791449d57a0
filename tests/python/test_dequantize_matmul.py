"""Standard ONNX weight-only quantization: MatMul(A, DequantizeLinear(W)) of a constant
weight blocked along K (INT4/UINT4/INT8/UINT8, with and without zero points, K a multiple of
the block or not), or scaled per output column or per tensor, runs as
ai.onnx_light.fused::DequantizeMatMul on the packed quantized weight: the same result as
onnxruntime on the same file (DequantizeLinear then MatMul, within 1e-4 relative), the plan
neither folds the DequantizeLinear nor runs it per call, and a DequantizeLinear the fusion
cannot take (scales per row of K, a second reader) keeps the ordinary path."""
from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_light.onnx_py._onnxpykernels import runtime

TYPES = {"int4": (TensorProto.INT4, -8, 7), "uint4": (TensorProto.UINT4, 0, 15),
         "int8": (TensorProto.INT8, -128, 127), "uint8": (TensorProto.UINT8, 0, 255)}


def quantized(name, dtype, values):
    elem = TYPES[dtype][0]
    return helper.make_tensor(name, elem, list(values.shape), values.flatten().tolist())


# Scale layouts besides blocks: (scale shape for W [k, n], DequantizeLinear attributes).
LAYOUTS = {
    "per_tensor": (lambda k, n: (), {}),
    "per_tensor_1d": (lambda k, n: (1,), {}),
    "per_column": (lambda k, n: (n,), {"axis": 1}),
    "per_column_default_axis": (lambda k, n: (n,), {}),
    "per_column_axis_-1": (lambda k, n: (n,), {"axis": -1}),
    "per_row": (lambda k, n: (k,), {"axis": 0}),
}


def build(dtype="int4", k=96, n=40, block=32, zero_point=True, second_reader=False,
          layout=None, m=3, seed=0):
    rng = np.random.default_rng(seed)
    _, lo, hi = TYPES[dtype]
    blocks = (k + block - 1) // block
    w = rng.integers(lo, hi + 1, (k, n))
    inits = [quantized("w", dtype, w)]
    scale_shape = LAYOUTS[layout][0](k, n) if layout else (blocks, n)
    inits.append(numpy_helper.from_array(
        (rng.random(scale_shape) * 0.1 + 0.01).astype(np.float32), "scale"))
    dq_inputs = ["w", "scale"]
    if zero_point:
        inits.append(quantized("zp", dtype, rng.integers(lo, hi + 1, scale_shape)))
        dq_inputs.append("zp")
    attrs = LAYOUTS[layout][1] if layout else {"axis": 0, "block_size": block}
    nodes = [helper.make_node("DequantizeLinear", dq_inputs, ["wf"], name="dq", **attrs),
             helper.make_node("MatMul", ["a", "wf"], ["y"], name="mm")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_reader:
        nodes.append(helper.make_node("MatMul", ["a", "wf"], ["y2"], name="mm2"))
        outputs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "a", TensorProto.FLOAT, ["m", k])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    a = rng.standard_normal((m, k)).astype(np.float32)
    return model.SerializeToString(), {"a": a}


def run_both(data, feeds):
    # onnxruntime without graph optimizations runs the DequantizeLinear then the MatMul as
    # written (its own rewrite to MatMulNBits quantizes the activations: errors up to 1e-2).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    theirs = dict(zip(names, session.run(names, feeds)))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    ours_session = runtime.RuntimeSession(data)
    out = ours_session.run(context, feeds)
    ours = {name: np.from_dlpack(out[name]).copy() for name in names}
    ops = collections.Counter(e.op_type for e in context.events()
                              if e.action == runtime.RuntimeEventAction.kKernel)
    return ours, theirs, ops


@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("k,block,m", [(96, 32, 3), (100, 16, 1), (256, 128, 5), (70, 64, 1)])
def test_a_blocked_weight_runs_packed_and_matches_onnxruntime(dtype, zero_point, k, block, m):
    data, feeds = build(dtype, k=k, block=block, zero_point=zero_point, m=m)
    ours, theirs, ops = run_both(data, feeds)
    scale = np.abs(theirs["y"]).max()
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-4, atol=1e-4 * scale)
    # One fused node per call: no DequantizeLinear at run time, no MatMul on a FLOAT weight.
    assert ops == {"DequantizeMatMul": 1}


@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("layout", ["per_tensor", "per_tensor_1d", "per_column",
                                    "per_column_default_axis", "per_column_axis_-1"])
@pytest.mark.parametrize("k,m", [(96, 3), (300, 1)])
def test_per_column_and_per_tensor_scales_run_packed_and_match_onnxruntime(dtype, zero_point,
                                                                           layout, k, m):
    data, feeds = build(dtype, k=k, zero_point=zero_point, layout=layout, m=m)
    ours, theirs, ops = run_both(data, feeds)
    scale = np.abs(theirs["y"]).max()
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-4, atol=1e-4 * scale)
    assert ops == {"DequantizeMatMul": 1}


@pytest.mark.parametrize("layout", [None, "per_column", "per_tensor"])
def test_the_packed_weight_is_smaller_than_its_float_form(layout):
    k, n = 512, 256
    data, feeds = build("int4", k=k, n=n, block=32, layout=layout)
    before = runtime.packed_weight_bytes()
    ours, theirs, _ = run_both(data, feeds)
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-4,
                               atol=1e-4 * np.abs(theirs["y"]).max())
    # 4-bit values, a float scale and zero point per block (32, or 128 when the scales are
    # per column or per tensor): under a quarter of FLOAT.
    grown = runtime.packed_weight_bytes() - before
    assert 0 < grown < k * n * 4 // 4


def test_without_fusion_the_plan_folds_the_dequantize_once():
    data, feeds = build("int4")
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    session = runtime.RuntimeSession(data, runtime.RuntimeSessionOptions(fuse_subgraphs=False))
    session.run(context, feeds)
    ops = collections.Counter(e.op_type for e in context.events()
                              if e.action == runtime.RuntimeEventAction.kKernel)
    assert ops == {"MatMul": 1}


def test_a_dequantize_the_fusion_cannot_take_keeps_the_ordinary_path():
    for data, feeds in (build("int8", layout="per_row"), build("int4", second_reader=True)):
        ours, theirs, ops = run_both(data, feeds)
        for name in theirs:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4,
                                       atol=1e-4 * np.abs(theirs[name]).max())
        assert "DequantizeMatMul" not in ops


def run_int8(data, feeds, level=4):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)),
                                     events_enabled=True)
    options = runtime.RuntimeSessionOptions(dequantize_matmul_accuracy_level=level)
    out = runtime.RuntimeSession(data, options).run(context, feeds)
    ops = collections.Counter(e.op_type for e in context.events()
                              if e.action == runtime.RuntimeEventAction.kKernel)
    return np.from_dlpack(out["y"]).copy(), ops


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("m", [1, 3])
def test_accuracy_level_4_quantizes_the_activations_as_onnxruntime_does(dtype, zero_point, m):
    data, feeds = build(dtype, k=256, n=48, block=32, zero_point=zero_point, m=m)
    ours, ops = run_int8(data, feeds)
    assert ops == {"DequantizeMatMul": 1}
    exact, theirs, _ = run_both(data, feeds)
    # onnxruntime's own optimized session rewrites the pair into MatMulNBits with int8
    # activations (session.qdq_matmulnbits_accuracy_level defaults to 4).
    optimized = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (reference,) = optimized.run(["y"], feeds)
    scale = np.abs(theirs["y"]).max()
    assert not np.array_equal(ours, exact["y"])  # the activations really were quantized
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(ours, theirs["y"], rtol=0, atol=2e-2 * scale)


def test_accuracy_level_4_keeps_float_where_int8_does_not_apply():
    # 8-bit weights: the int8 path is for 4-bit weights only, so the product stays exact.
    data, feeds = build("int8", k=96, block=32)
    ours, ops = run_int8(data, feeds)
    exact, _, _ = run_both(data, feeds)
    assert ops == {"DequantizeMatMul": 1}
    np.testing.assert_array_equal(ours, exact["y"])


def test_an_unknown_accuracy_level_is_refused_with_its_name():
    data, _ = build("int4")
    with pytest.raises(ValueError, match="dequantize_matmul_accuracy_level must be 0 .* got 3"):
        runtime.RuntimeSession(data, runtime.RuntimeSessionOptions(
            dequantize_matmul_accuracy_level=3))
