"""Where a model's time goes: per-op-type and per-node wall time from a context's events.

Enable events on the context, run, then summarise the kernel events of the runs you care
about (each kernel event carries the node's wall time, ``duration_ns``)::

    import numpy
    from onnx_light import profiling
    from onnx_light.onnx_lib import parser
    from onnx_light.onnx_py._onnxpykernels import runtime

    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "g (float[2, 2] x) => (float[2, 2] y) { t = MatMul(x, x) y = Relu(t) }")
    context = runtime.RuntimeContext(runtime.KernelContext(18), events_enabled=True)
    session = runtime.RuntimeSession(model)
    session.run(context, {"x": numpy.ones((2, 2), numpy.float32)})
    print(profiling.format_table(profiling.op_table(context.events())))

Or build the session (or the state) with ``RuntimeSessionOptions(profile=True)``: every
node of every run is timed without events, and ``profile_table`` prints the totals per run::

    options = runtime.RuntimeSessionOptions(profile=True, executor="inline")
    profiled = runtime.RuntimeSession(model, options)
    for _ in range(3):
        profiled.run(context, {"x": numpy.ones((2, 2), numpy.float32)})
    print(profiling.profile_table(profiled, by="node"))

With the flow-graph executor, nodes of one run may overlap: their times add up to more
than the run's wall time. ``RuntimeSessionOptions(executor="inline")`` gives a table whose
total is the time spent in kernels.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

from onnx_light.onnx_py._onnxpykernels import runtime


@dataclass
class Row:
    name: str          # op type, or node name for node tables
    op_type: str
    calls: int
    total_ms: float
    share: float       # of the table's total


def _kernel_events(events):
    return [e for e in events if e.action == runtime.RuntimeEventAction.kKernel]


def op_table(events, runs: int = 1) -> list[Row]:
    """Kernel time by op type, largest first; `runs` divides totals and counts (per run)."""
    by = collections.defaultdict(lambda: [0, 0])
    for e in _kernel_events(events):
        by[e.op_type][0] += e.duration_ns
        by[e.op_type][1] += 1
    return _rows({k: (k, v) for k, v in by.items()}, runs)


def node_table(events, runs: int = 1, top: int = 20) -> list[Row]:
    """Kernel time by node, largest first (the `top` nodes)."""
    by = collections.defaultdict(lambda: [0, 0])
    ops = {}
    for e in _kernel_events(events):
        name = e.node_name or f"({e.op_type})"  # unnamed nodes of one type share a row
        by[name][0] += e.duration_ns
        by[name][1] += 1
        ops[name] = e.op_type
    return _rows({k: (ops[k], v) for k, v in by.items()}, runs)[:top]


def session_rows(session_or_state, by: str = "op", top: int | None = None) -> list[Row]:
    """Per-run time by op type (`by="op"`) or by node (`by="node"`), largest first, from a
    session or state built with ``RuntimeSessionOptions(profile=True)``: no events needed,
    every run of the session counted (``session.clear_profile()`` starts over)."""
    if by not in ("op", "node"):
        raise ValueError(f"session_rows: by must be 'op' or 'node', not {by!r}")
    session = getattr(session_or_state, "session", session_or_state)
    profile = session.profile()
    by_key, ops = collections.defaultdict(lambda: [0, 0]), {}
    for n in profile["nodes"]:
        key = n["op_type"] if by == "op" else (n["node"] or f"({n['op_type']})")
        by_key[key][0] += n["total_ms"] * 1e6
        by_key[key][1] += n["calls"]
        ops[key] = n["op_type"]
    rows = _rows({k: (ops[k], v) for k, v in by_key.items()}, profile["runs"])
    return rows if top is None else rows[:top]


def profile_table(session_or_state, by: str = "op", top: int | None = 20) -> str:
    """`session_rows` as a readable table (see format_table)."""
    return format_table(session_rows(session_or_state, by, top))


def _rows(entries, runs):
    total = sum(v[0] for _, v in entries.values()) or 1
    rows = [Row(name, op, v[1] // max(runs, 1), v[0] / 1e6 / max(runs, 1), v[0] / total)
            for name, (op, v) in entries.items()]
    return sorted(rows, key=lambda r: -r.total_ms)


def format_table(rows: list[Row]) -> str:
    """A readable table: name, calls, ms, share, us per call."""
    width = max([len(r.name) for r in rows] + [7])
    lines = [f"{'op/node':<{width}}  {'calls':>6}  {'ms':>9}  {'share':>6}  {'us/call':>9}"]
    for r in rows:
        per_call = 1e3 * r.total_ms / r.calls if r.calls else 0.0
        lines.append(f"{r.name:<{width}}  {r.calls:>6}  {r.total_ms:>9.3f}  "
                     f"{100 * r.share:>5.1f}%  {per_call:>9.1f}")
    lines.append(f"{'total':<{width}}  {sum(r.calls for r in rows):>6}  "
                 f"{sum(r.total_ms for r in rows):>9.3f}")
    return "\n".join(lines)
