"""Kernels follow the opset the model imports, not the context's default opsets.

Softmax and LogSoftmax are the witnesses: opsets 1-12 coerce the input to 2D at `axis`
(default 1) and normalise over everything from it on; opset 13 normalises along one axis
(default -1). With a 3-D input and the default axis the two answers differ.
"""
import numpy as np
import pytest

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime

X = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 7) * 0.25 - np.linspace(
    0, 2.3, 24, dtype=np.float32).reshape(2, 3, 4)


def softmax(x, axes, log):
    shifted = x - x.max(axis=axes, keepdims=True)
    if log:
        return shifted - np.log(np.exp(shifted).sum(axis=axes, keepdims=True))
    e = np.exp(shifted)
    return e / e.sum(axis=axes, keepdims=True)


def legacy(log):
    """Opsets 1-12, axis 1: flatten to [2, 12] and normalise each row."""
    return softmax(X.reshape(2, 12), 1, log).reshape(X.shape)


def modern(log):
    """Opset 13, axis -1."""
    return softmax(X, -1, log)


def run(text, context_opset, feeds=None):
    session = runtime.RuntimeSession(parser.parse_model(text))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(context_opset)))
    out = session.run(context, feeds or {"x": X})
    return np.from_dlpack(out["y"])


def model(op, opset):
    return (f'<ir_version: 8, opset_import: ["" : {opset}]>'
            f"g (float[2, 3, 4] x) => (float[2, 3, 4] y) {{ y = {op}(x) }}")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_the_two_semantics_differ_on_this_input(op):
    log = op == "LogSoftmax"
    assert not np.allclose(legacy(log), modern(log), atol=1e-3)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_an_opset_12_model_under_an_opset_18_context_follows_opset_12(op):
    log = op == "LogSoftmax"
    got = run(model(op, 12), 18)
    np.testing.assert_allclose(got, legacy(log), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, modern(log), atol=1e-3)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_an_opset_13_model_under_an_opset_11_context_follows_opset_13(op):
    log = op == "LogSoftmax"
    got = run(model(op, 13), 11)
    np.testing.assert_allclose(got, modern(log), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, legacy(log), atol=1e-3)


def test_a_function_body_follows_the_function_opset_import():
    def text(model_opset, function_opset):
        return (f'<ir_version: 8, opset_import: ["" : {model_opset}, "local" : 1]>'
                "g (float[2, 3, 4] x) => (float[2, 3, 4] y) { y = local.F(x) }"
                f'<domain: "local", opset_import: ["" : {function_opset}]>'
                "F (a) => (r) { r = Softmax(a) }")

    np.testing.assert_allclose(run(text(18, 12), 18), legacy(False), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(text(12, 13), 11), modern(False), rtol=1e-5, atol=1e-6)


def test_an_if_branch_follows_the_model_opset():
    text = ('<ir_version: 8, opset_import: ["" : 12]>'
            "g (bool c, float[2, 3, 4] x) => (float[2, 3, 4] y) {"
            "  y = If (c) <then_branch = t () => (float[2, 3, 4] z) { z = Softmax(x) },"
            "              else_branch = e () => (float[2, 3, 4] z) { z = Identity(x) }>"
            "}")
    got = run(text, 18, {"c": np.array(True), "x": X})
    np.testing.assert_allclose(got, legacy(False), rtol=1e-5, atol=1e-6)
