"""onnx_light.profiling: per-op and per-node kernel time tables from a context's events; the
module's example runs as written."""
from __future__ import annotations

import re

import numpy as np

from onnx_light import profiling
from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime


def run_twice():
    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "g (float[2, 2] x) => (float[2, 2] y) { t = MatMul(x, x) u = Relu(t) y = Relu(u) }")
    context = runtime.RuntimeContext(runtime.KernelContext(18), events_enabled=True)
    session = runtime.RuntimeSession(model)
    for _ in range(2):
        session.run(context, {"x": np.ones((2, 2), np.float32)})
    return context.events()


def test_op_table_counts_calls_per_op_type_and_per_run():
    events = run_twice()
    rows = {r.name: r for r in profiling.op_table(events, runs=2)}
    assert set(rows) == {"MatMul", "Relu"}
    assert rows["MatMul"].calls == 1 and rows["Relu"].calls == 2
    assert abs(sum(r.share for r in rows.values()) - 1.0) < 1e-9
    kernel = [e for e in events if e.action == runtime.RuntimeEventAction.kKernel]
    assert len(kernel) == 6 and all(e.duration_ns >= 0 for e in kernel)
    total_ns = sum(e.duration_ns for e in kernel)
    assert abs(sum(r.total_ms for r in rows.values()) - total_ns / 1e6 / 2) < 1e-9


def test_node_table_and_format():
    # The parsed nodes have no names: unnamed nodes of one op type share a row.
    rows = {r.name: r for r in profiling.node_table(run_twice(), runs=2)}
    assert set(rows) == {"(MatMul)", "(Relu)"}
    assert rows["(MatMul)"].calls == 1 and rows["(Relu)"].calls == 2
    text = profiling.format_table(list(rows.values()))
    assert text.splitlines()[0].split() == ["op/node", "calls", "ms", "share", "us/call"]
    assert re.search(r"^total\s+3\s", text.splitlines()[-1])


def test_the_module_example_runs(capsys):
    lines = profiling.__doc__.split("::", 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    exec(compile("\n".join(block), "example", "exec"), {})
    assert "MatMul" in capsys.readouterr().out
