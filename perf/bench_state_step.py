"""Per-step cost of PersistentValueState.run against a stateless RuntimeSession.run of the
same graph whose bound outputs are fed back by hand (using model.graph.persistent_bindings
only), on the spec's one-node Add graph and on a 24-node chain. Same process, same run.

    PYTHONPATH=. python perf/bench_state_step.py
"""
from __future__ import annotations

import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# From a source checkout, use this checkout's build (python/onnx_light, where CMake puts the
# extension) before any installed copy; otherwise the installed package.
_BUILT = os.path.join(REPO, "python", "onnx_light", "onnx_py")
if os.path.isdir(_BUILT) and any(f.startswith("_onnxpykernels") for f in os.listdir(_BUILT)):
    sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

from onnx_light.onnx_lib import parser  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402


def add_model():
    return parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "accumulate (float[2] delta, float[2] past) => (float[2] present)"
        "{ present = Add(delta, past) }")


def chain_model(nodes: int = 24):
    body = ["t0 = Add(delta, past)"]
    for i in range(1, nodes - 1):
        body.append(f"t{i} = {'Mul' if i % 2 else 'Add'}(t{i - 1}, delta)")
    body.append(f"present = Identity(t{nodes - 2})")
    return parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "chain (float[2] delta, float[2] past) => (float[2] present) {" + " ".join(body) + "}")


def bind(model):
    b = model.graph.persistent_bindings.add()
    b.input_name, b.output_name = "past", "present"
    return model


def interleaved_medians(steps, n=20000, block=500) -> list:
    """Median ns per call of each step function, timed in alternating blocks of `block`
    calls so that load changes on a shared machine hit every side alike."""
    for step in steps:
        for _ in range(200):
            step()
    samples = [[] for _ in steps]
    for _ in range(n // block):
        for step, out in zip(steps, samples):
            for _ in range(block):
                t0 = time.perf_counter_ns()
                step()
                out.append(time.perf_counter_ns() - t0)
    return [float(np.median(s)) for s in samples]


def measure(name, model):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    delta = np.ones(2, np.float32)
    state = runtime.PersistentValueState(model, initial={"past": np.zeros(2, np.float32)})

    session = runtime.RuntimeSession(model)
    pairs = [(b.input_name, b.output_name) for b in model.graph.persistent_bindings]
    fed = {"past": np.zeros(2, np.float32)}

    def stateless_step():
        out = session.run(context, {"delta": delta, **fed})
        for inp, outp in pairs:
            fed[inp] = out[outp]

    stateful, stateless = interleaved_medians(
        [lambda: state.run(context, {"delta": delta}), stateless_step])
    print(f"{name:>12}: state.run {stateful / 1e3:6.2f} us | stateless run + feedback "
          f"{stateless / 1e3:6.2f} us | ratio {stateful / stateless:.2f}")


if __name__ == "__main__":
    measure("Add", bind(add_model()))
    measure("24-node", bind(chain_model()))
