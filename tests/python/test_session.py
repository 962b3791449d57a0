"""runtime.RuntimeSession, RuntimeContext (events, values, Python kernels) and options."""
import threading

import numpy as np
import pytest

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime


def numpy_ptr(a):
    return a.__array_interface__["data"][0]


def add_model():
    return parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "g (float[2] x, float[2] y) => (float[2] z, float[2] w) "
        "{ z = Add(x, y) w = Identity(x) }")


def context(**kwargs):
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)), **kwargs)


def test_run_returns_runtime_tensors_and_shares_input_bytes():
    session = runtime.RuntimeSession(add_model())
    x = np.array([1, 2], dtype=np.float32)
    y = np.array([10, 20], dtype=np.float32)
    out = session.run(context(), {"x": x, "y": y})
    assert set(out) == {"z", "w"}
    assert isinstance(out["z"], runtime.Tensor)
    np.testing.assert_array_equal(np.from_dlpack(out["z"]), [11, 22])
    # Identity forwards the input's bytes: the NumPy array is borrowed, never copied.
    assert out["w"].data_ptr == numpy_ptr(x)


def test_feed_errors_name_the_input():
    session = runtime.RuntimeSession(add_model())
    x = np.ones(2, dtype=np.float32)
    with pytest.raises(ValueError, match="unknown feed name\\(s\\) 'nope'"):
        session.run(context(), {"x": x, "y": x, "nope": x})
    with pytest.raises(ValueError, match="missing required input 'y'"):
        session.run(context(), {"x": x})
    with pytest.raises(ValueError, match="input 'y': expected dtype FLOAT, got INT64"):
        session.run(context(), {"x": x, "y": np.ones(2, dtype=np.int64)})


def test_python_kernel_runs_with_values_and_events():
    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18, "py" : 1]>'
        "g (float[3] x) => (float[3] y) { t = py.Twice(x) y = Identity(t) }")
    seen = []

    def twice(ctx, inputs):
        seen.append(ctx.has_value("x"))
        np.testing.assert_array_equal(np.from_dlpack(ctx.get_value("x")), [1, 2, 3])
        ctx.put_value("scratch", np.zeros(1, dtype=np.float32))
        return [np.from_dlpack(inputs[0]) * 2]

    ctx = context(events_enabled=True)
    ctx.register_kernel("py", "Twice", twice)
    session = runtime.RuntimeSession(model)
    for _ in range(2):
        out = session.run(ctx, {"x": np.array([1, 2, 3], dtype=np.float32)})
        np.testing.assert_array_equal(np.from_dlpack(out["y"]), [2, 4, 6])
    assert seen == [True, True]
    assert not ctx.has_value("scratch")  # each run used a fresh child context
    events = ctx.events()
    assert [(e.action, e.node_name) for e in events][:1] == [
        (runtime.RuntimeEventAction.kKernel, "")]
    assert [e.op_type for e in events] == ["Twice", "Identity"] * 2
    ctx.ClearEvents()
    assert ctx.events() == []
    quiet = context()
    quiet.register_kernel("py", "Twice", twice)
    session.run(quiet, {"x": np.array([1, 2, 3], dtype=np.float32)})
    assert quiet.events() == []


def test_python_kernel_errors_name_the_node():
    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18, "py" : 1]>'
        "g (float[1] x) => (float[1] y) { y = py.Bad(x) }")

    def bad(ctx, inputs):
        raise ValueError("no good")

    ctx = context()
    ctx.register_kernel("py", "Bad", bad)
    with pytest.raises(ValueError, match="Bad node '': .*no good"):
        runtime.RuntimeSession(model).run(ctx, {"x": np.ones(1, dtype=np.float32)})


def test_session_options_validate_capacity():
    o = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=64)
    assert o.persistent_tensor_initial_capacity == 64
    assert o.intra_op_threads == 0
    o.persistent_tensor_initial_capacity = 0
    assert o.persistent_tensor_initial_capacity == 0
    o.persistent_tensor_initial_capacity = 2**64 - 1
    assert o.persistent_tensor_initial_capacity == 2**64 - 1
    with pytest.raises(ValueError):
        o.persistent_tensor_initial_capacity = -1
    with pytest.raises(ValueError):
        o.persistent_tensor_initial_capacity = 2**64
    with pytest.raises(TypeError):
        o.persistent_tensor_initial_capacity = 1.5
    with pytest.raises(TypeError):
        o.persistent_tensor_initial_capacity = True
    with pytest.raises(TypeError):
        runtime.RuntimeSessionOptions(64)  # keyword-only
    with pytest.raises(ValueError):
        runtime.RuntimeSessionOptions(executor="sometimes")


def test_concurrent_runs_release_the_gil_and_agree():
    session = runtime.RuntimeSession(
        add_model(), runtime.RuntimeSessionOptions(intra_op_threads=2, executor="flow_graph"))
    results = [None] * 4

    def work(i):
        x = np.full(2, i, dtype=np.float32)
        out = session.run(context(), {"x": x, "y": x})
        results[i] = np.from_dlpack(out["z"]).tolist()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [[2 * i, 2 * i] for i in range(4)]
