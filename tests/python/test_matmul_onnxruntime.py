"""MatMul and Gemm on random shapes against onnxruntime, with B a constant initializer (packed
once by the kernel and reused) and with B fed at run time (packed per call). Each session runs
several times with different A so that reused packs are exercised; results match
onnxruntime's within float tolerance."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_light.onnx_py._onnxpykernels import runtime

OPSET = 18


def _model(op: str, k: int, n: int, weight: np.ndarray | None, attrs=None, bias=None):
    """Y = op(A, W[, C]); W is an initializer when `weight` is given, else a graph input."""
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, None)]
    initializers = []
    if weight is None:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, None))
    else:
        initializers.append(numpy_helper.from_array(weight, "W"))
    node_inputs = ["A", "W"]
    if bias is not None:
        initializers.append(numpy_helper.from_array(bias, "C"))
        node_inputs.append("C")
    node = helper.make_node(op, node_inputs, ["Y"], **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _sessions(model: onnx.ModelProto):
    ort_session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(OPSET)))
    return ort_session, lambda feeds: np.from_dlpack(session.run(context, feeds)["Y"])


def _close(got, expected, k):
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))


SHAPES = [(1, 7, 5), (2, 33, 64), (16, 256, 688), (17, 300, 130), (100, 129, 67),
          (130, 520, 96), (5, 64, 1024)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("constant", [True, False], ids=["initializer", "graph_input"])
def test_matmul_matches_onnxruntime_on_repeated_runs(m, k, n, constant):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    w = rng.standard_normal((k, n), dtype=np.float32)
    ort_session, run = _sessions(_model("MatMul", k, n, w if constant else None))
    # Rank-3 A (batch folded into M) and different values every run; the last run is
    # decode-shaped (one row: the unpacked GEMV path) and then M > 1 again.
    for rows in (m, m, max(1, m // 2), 1, m):
        a = rng.standard_normal((2, rows, k), dtype=np.float32)
        feeds = {"A": a} if constant else {"A": a, "W": w}
        expected = ort_session.run(None, feeds)[0]
        _close(run(feeds), expected, k)


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_constant_weight_and_bias_matches_onnxruntime(m, k, n, trans_b):
    rng = np.random.default_rng(m * 7919 + k * 31 + n + trans_b)
    w = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    bias = rng.standard_normal((n,), dtype=np.float32)
    attrs = {"transB": trans_b, "alpha": 0.5, "beta": 2.0}
    ort_session, run = _sessions(_model("Gemm", k, n, w, attrs, bias))
    for rows in (m, m, 1, m):
        a = rng.standard_normal((rows, k), dtype=np.float32)
        expected = ort_session.run(None, {"A": a})[0]
        _close(run({"A": a}), expected, k)


def test_a_fed_weight_with_the_constant_shape_never_reuses_the_constant_pack():
    """Two MatMuls in one graph, one on an initializer W, one on a fed V of the same shape:
    V changes every run and its product follows it."""
    rng = np.random.default_rng(5)
    k, n = 64, 96
    w = rng.standard_normal((k, n), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"]),
         helper.make_node("MatMul", ["A", "V"], ["Z"])], "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("V", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(OPSET)))
    a = rng.standard_normal((8, k), dtype=np.float32)
    v = w.copy()
    for _ in range(3):
        out = session.run(context, {"A": a, "V": v})
        _close(np.from_dlpack(out["Y"]), a @ w, k)
        _close(np.from_dlpack(out["Z"]), a @ v, k)
        v *= -2.0  # same buffer, new values
    assert not np.allclose(np.from_dlpack(out["Z"]), a @ w)
