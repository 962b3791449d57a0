"""A Python kernel registered with_info=True sees the opsets in force where its node sits,
as C++ kernels do through KernelInfo: the model's opset_import (or, in a model-local
function's body, the function's own), never the context's default opsets."""
import numpy as np

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime


def run_probe(text, context_opset=11):
    """Runs the model with py.Probe recorded; returns the KernelInfo of each call."""
    seen = []

    def probe(context, inputs, info):
        seen.append(info)
        return [np.from_dlpack(inputs[0])]

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(context_opset)))
    context.register_kernel("py", "Probe", probe, with_info=True)
    session = runtime.RuntimeSession(parser.parse_model(text))
    out = session.run(context, {"x": np.arange(3, dtype=np.float32)})
    assert np.from_dlpack(out["y"]).tolist() == [0.0, 1.0, 2.0]
    assert seen
    return seen


def graph_model(opset):
    return (f'<ir_version: 8, opset_import: ["" : {opset}, "py" : 1]>'
            "g (float[3] x) => (float[3] y) { y = py.Probe <tag = 1> (x) }")


def test_an_opset_12_and_an_opset_18_model_give_the_kernel_their_own_opsets():
    (info12,) = run_probe(graph_model(12))
    (info18,) = run_probe(graph_model(18))
    assert info12.opset("") == 12 and info12.opset("ai.onnx") == 12
    assert info18.opset("") == 18
    assert info12.opsets[""] == 12 and info18.opsets[""] == 18
    for info in (info12, info18):
        assert info.domain == "py" and info.op_type == "Probe"
        assert info.node_opset == 1 and info.opset("py") == 1
        assert info.since_version == 1
        assert info.opset("not.imported") == 0
        assert "Probe" in repr(info)


def test_a_function_body_gives_the_kernel_the_function_opset_import():
    def text(model_opset, function_opset):
        return (f'<ir_version: 8, opset_import: ["" : {model_opset}, "py" : 1, "local" : 1]>'
                "g (float[3] x) => (float[3] y) { t = local.F(x) y = py.Probe(t) }"
                f'<domain: "local", opset_import: ["" : {function_opset}, "py" : 1]>'
                "F (a) => (r) { r = py.Probe(a) }")

    inside, outside = run_probe(text(18, 12))
    assert inside.opset("") == 12 and outside.opset("") == 18
    inside, outside = run_probe(text(12, 18), context_opset=15)
    assert inside.opset("") == 18 and outside.opset("") == 12


def test_the_opsets_stay_those_of_the_model_whatever_the_context_default():
    for context_opset in (11, 13, 18):
        (info,) = run_probe(graph_model(12), context_opset)
        assert info.opset("") == 12


def test_a_kernel_registered_without_info_is_called_with_two_arguments():
    calls = []

    def twice(context, inputs):
        calls.append(len(inputs))
        return [np.from_dlpack(inputs[0]) * 2]

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    context.register_kernel("py", "Probe", twice)
    session = runtime.RuntimeSession(parser.parse_model(graph_model(12)))
    out = session.run(context, {"x": np.arange(3, dtype=np.float32)})
    assert np.from_dlpack(out["y"]).tolist() == [0.0, 2.0, 4.0] and calls == [1]
