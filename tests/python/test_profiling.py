"""onnx_light.profiling: per-op and per-node kernel time tables from a context's events; the
module's example runs as written."""
from __future__ import annotations

import re

import numpy as np
import pytest

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


def test_the_module_examples_run(capsys):
    """Every ``::`` block of the module docstring, in order, in one namespace."""
    namespace = {}
    for part in profiling.__doc__.split("::")[1:]:
        block = []
        for line in part.splitlines()[1:]:
            if line and not line.startswith("    "):
                break
            block.append(line[4:])
        exec(compile("\n".join(block), "example", "exec"), namespace)
    out = capsys.readouterr().out
    assert "MatMul" in out and "(Relu)" in out


def three_node_model():
    return parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "g (float[2, 2] x) => (float[2, 2] y) { t = MatMul(x, x) u = Relu(t) y = Relu(u) }")


def test_a_profiled_session_counts_every_node_of_every_run_without_events():
    session = runtime.RuntimeSession(three_node_model(), runtime.RuntimeSessionOptions(profile=True))
    context = runtime.RuntimeContext(runtime.KernelContext(18))  # events off
    for _ in range(3):
        session.run(context, {"x": np.ones((2, 2), np.float32)})
    profile = session.profile()
    assert profile["runs"] == 3
    assert [(n["op_type"], n["calls"]) for n in profile["nodes"]] == [
        ("MatMul", 3), ("Relu", 3), ("Relu", 3)]
    assert all(n["total_ms"] >= 0 for n in profile["nodes"])
    rows = {r.name: r for r in profiling.session_rows(session)}
    assert rows["MatMul"].calls == 1 and rows["Relu"].calls == 2  # per run
    assert abs(sum(r.share for r in rows.values()) - 1.0) < 1e-9
    text = profiling.profile_table(session, by="node")
    assert re.search(r"^\(Relu\)\s+2\s", text, re.M) and re.search(r"^total\s+3\s", text.splitlines()[-1])
    session.clear_profile()
    assert session.profile() == {"runs": 0, "nodes": []}


def test_profile_needs_the_option_and_a_known_grouping():
    session = runtime.RuntimeSession(three_node_model())
    with pytest.raises(ValueError, match=r"without RuntimeSessionOptions\(profile=True\)"):
        session.profile()
    profiled = runtime.RuntimeSession(three_node_model(), runtime.RuntimeSessionOptions(profile=True))
    with pytest.raises(ValueError, match="by must be 'op' or 'node', not 'layer'"):
        profiling.session_rows(profiled, by="layer")
    assert "profile=True" in repr(runtime.RuntimeSessionOptions(profile=True))


def test_a_profiled_state_of_an_exported_decoder_times_every_kernel_call():
    """The tiny Llama with its caches bound: per run, the profile holds exactly the kernel
    calls the event log records, and the op table names the decoder's kernels."""
    from models import export_hf
    from onnx_light import onnx as ol_onnx

    model = ol_onnx.load_model(export_hf.ensure("llama", with_cache=True))
    export_hf.add_cache_bindings(model, export_hf.cache_shape("llama")[0])
    state = runtime.PersistentValueState(
        model, initial=export_hf.empty_cache("llama", 1),
        options=runtime.RuntimeSessionOptions(profile=True))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    for start, ids in ((0, [3, 5, 7]), (3, [9])):  # the prompt, then one decode step
        n = len(ids)
        state.run(context, {"input_ids": np.array([ids], np.int64),
                            "attention_mask": np.ones((1, start + n), np.int64),
                            "position_ids": np.arange(start, start + n, dtype=np.int64)[None]})
    kernel_events = [e for e in context.events() if e.action == runtime.RuntimeEventAction.kKernel]
    profile = state.session.profile()
    assert profile["runs"] == 2
    assert sum(n["calls"] for n in profile["nodes"]) == len(kernel_events)
    ops = {r.name for r in profiling.session_rows(state)}
    assert {"MatMul", "MatMulGroup"} & ops and "RMSNormalization" in ops
