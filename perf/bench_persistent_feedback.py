"""Token-by-token decode of a one-node Attention model through a PersistentValueState and
through a stateless RuntimeSession fed back by hand, with the kernel's storage counters
(spec "Persistent input/output feedback", benchmark paragraph). Writes one JSON document.

    PYTHONPATH=. python perf/bench_persistent_feedback.py --tokens 16 [--out result.json]

Model: one opset-23 Attention node, FLOAT q/k/v [1, 1, 1, D] per token and caches
past_key/past_value [1, 1, len, D] bound to present_key/present_value. The stateless side
feeds outputs back using model.graph.persistent_bindings only (no second mapping, no name
guessing). Every step checks, and exits non-zero on a violation:
  - numerical output: y, present_key, present_value equal between both sides (tolerance)
    and y equal to a NumPy reference attention over all tokens so far;
  - pointer identity: state.values[input] is the buffer of the returned bound output
    (retention copies no payload), the previous token's prefix is unchanged, and when the
    kernel reports reuse, the cache did not move.
Times are raw single observations (perf_counter_ns around each run), not medians: compare
within one run. retained_logical_bytes sums the visible lengths of the retained tensors
(not reserved capacity); event_workspace_peak_bytes is the largest peak_bytes among the
step's runtime events (not process RSS); the storage_* counters sum the step's
kPersistentStorage events (Attention K/V construction, not state forwarding).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# From a source checkout, use this checkout's build (python/onnx_light, where CMake puts the
# extension) before any installed copy; otherwise the installed package.
_BUILT = os.path.join(REPO, "python", "onnx_light", "onnx_py")
if os.path.isdir(_BUILT) and any(f.startswith("_onnxpykernels") for f in os.listdir(_BUILT)):
    sys.path.insert(0, os.path.join(REPO, "python"))

from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

import numpy as np  # noqa: E402

from onnx_light import onnx as ol  # noqa: E402

COUNTERS = ("storage_allocations", "storage_allocated_bytes", "storage_prefix_copied_bytes",
            "storage_append_copied_bytes", "storage_reuse_count")
BOUND = (("past_key", "present_key"), ("past_value", "present_value"))


class CheckFailed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _value_info(name: str, dims) -> "ol.ValueInfoProto":
    v = ol.ValueInfoProto()
    v.name = name
    tt = v.type.tensor_type
    tt.elem_type = ol.TensorProto.FLOAT
    for d in dims:
        dim = tt.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d
    return v


def attention_model(head_size: int) -> "ol.ModelProto":
    """One Attention node; past_key <- present_key and past_value <- present_value."""
    d = head_size
    model = ol.ModelProto()
    model.ir_version = 10
    model.producer_name = "bench_persistent_feedback"
    opset = model.opset_import.add()
    opset.domain, opset.version = "", 23
    graph = model.graph
    graph.name = "attention_feedback"
    node = graph.node.add()
    node.op_type, node.name = "Attention", "attention"
    node.input.extend(["q", "k", "v", "", "past_key", "past_value"])
    node.output.extend(["y", "present_key", "present_value"])
    for name in ("q", "k", "v"):
        graph.input.append(_value_info(name, [1, 1, 1, d]))
    graph.input.append(_value_info("past_key", [1, 1, "past", d]))
    graph.input.append(_value_info("past_value", [1, 1, "past", d]))
    graph.output.append(_value_info("y", [1, 1, 1, d]))
    graph.output.append(_value_info("present_key", [1, 1, "total", d]))
    graph.output.append(_value_info("present_value", [1, 1, "total", d]))
    for inp, out in BOUND:
        b = graph.persistent_bindings.add()
        b.input_name, b.output_name = inp, out
    return model


def reference_attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Float64 softmax(q K^T / sqrt(D)) V for one query over [len, D] keys/values."""
    scores = keys.astype(np.float64) @ q.astype(np.float64) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max())
    return (weights / weights.sum()) @ values.astype(np.float64)


def git(*args: str):
    try:
        out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def revisions(target_ref: str) -> dict:
    status = git("status", "--porcelain", "--untracked-files=no")
    target = git("rev-parse", "--verify", "--quiet", target_ref)
    if target is None and "/" not in target_ref:  # a clone may only have the remote branch
        remote = git("rev-parse", "--verify", "--quiet", "origin/" + target_ref)
        if remote is not None:
            target_ref, target = "origin/" + target_ref, remote
    return {"source": git("rev-parse", "HEAD"),
            "source_dirty": bool(status) if status is not None else None,
            "target_ref": target_ref, "target": target}


def model_identity(model) -> dict:
    data = model.SerializeToString()
    return {"graph_name": model.graph.name,
            "opset_import": {o.domain: o.version for o in model.opset_import},
            "nodes": [n.op_type for n in model.graph.node],
            "persistent_bindings": [[b.input_name, b.output_name]
                                    for b in model.graph.persistent_bindings],
            "serialized_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def storage_report(events) -> dict:
    storage = [e for e in events if e.action == runtime.RuntimeEventAction.kPersistentStorage]
    report = {c: int(sum(getattr(e, c) for e in storage)) for c in COUNTERS}
    report["storage_events"] = len(storage)
    report["event_workspace_peak_bytes"] = int(max((e.peak_bytes for e in events), default=0))
    return report


def as_array(tensor) -> np.ndarray:
    return np.from_dlpack(tensor)


def run(tokens: int, head_size: int, capacity: int, seed: int, tolerance: float,
        target_ref: str) -> dict:
    model = attention_model(head_size)
    opsets = runtime.KernelContext(runtime.default_opset(23))
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=capacity)
    empty = np.zeros((1, 1, 0, head_size), np.float32)

    t0 = time.perf_counter_ns()
    state = runtime.PersistentValueState(
        model, initial={"past_key": empty, "past_value": empty.copy()}, options=options)
    stateful_setup_ns = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    session = runtime.RuntimeSession(model, options)
    stateless_setup_ns = time.perf_counter_ns() - t0

    stateful_ctx = runtime.RuntimeContext(opsets, events_enabled=True)
    stateless_ctx = runtime.RuntimeContext(opsets, events_enabled=True)
    # The stateless side's only feedback knowledge: the model's declared bindings.
    pairs = [(b.input_name, b.output_name) for b in model.graph.persistent_bindings]
    fed = {inp: np.zeros((1, 1, 0, head_size), np.float32) for inp, _ in pairs}

    rng = np.random.default_rng(seed)
    keys, values = [], []
    previous = {}  # bound input -> (data_ptr, copy of its bytes) after the last step
    steps = []
    for token in range(1, tokens + 1):
        feeds = {n: rng.standard_normal((1, 1, 1, head_size)).astype(np.float32)
                 for n in ("q", "k", "v")}
        keys.append(feeds["k"][0, 0, 0])
        values.append(feeds["v"][0, 0, 0])

        stateful_ctx.clear_events()
        t0 = time.perf_counter_ns()
        out = state.run(stateful_ctx, feeds)
        stateful_ns = time.perf_counter_ns() - t0
        stateful_storage = storage_report(stateful_ctx.events())

        stateless_ctx.clear_events()
        t0 = time.perf_counter_ns()
        plain = session.run(stateless_ctx, {**feeds, **fed})
        for inp, outp in pairs:
            fed[inp] = plain[outp]
        stateless_ns = time.perf_counter_ns() - t0
        stateless_storage = storage_report(stateless_ctx.events())

        # Numerical output: both sides against each other and y against NumPy.
        y = as_array(out["y"])
        expected = reference_attention(feeds["q"][0, 0, 0], np.stack(keys), np.stack(values))
        y_error = float(np.max(np.abs(y[0, 0, 0] - expected)))
        check(y_error <= tolerance, f"token {token}: y differs from the NumPy reference by "
              f"{y_error} (tolerance {tolerance})")
        side_error = 0.0
        for name in ("y", "present_key", "present_value"):
            a, b = as_array(out[name]), as_array(plain[name])
            check(a.shape == b.shape, f"token {token}: {name} shape {a.shape} (state) vs "
                  f"{b.shape} (stateless)")
            side_error = max(side_error, float(np.max(np.abs(a - b))))
        check(side_error <= tolerance, f"token {token}: state and stateless outputs differ by "
              f"{side_error} (tolerance {tolerance})")
        check(np.array_equal(as_array(out["present_key"])[0, 0], np.stack(keys)),
              f"token {token}: present_key is not the concatenation of every k fed")
        check(np.array_equal(as_array(out["present_value"])[0, 0], np.stack(values)),
              f"token {token}: present_value is not the concatenation of every v fed")

        # Pointer identity: the retained value is the returned output's buffer.
        retained = state.values
        retained_bytes = 0
        pointers = {}
        for inp, outp in pairs:
            kept, returned = retained[inp], out[outp]
            check(kept.data_ptr == returned.data_ptr, f"token {token}: state.values['{inp}'] "
                  f"at {kept.data_ptr:#x} is not the returned '{outp}' at {returned.data_ptr:#x}")
            check(tuple(kept.shape) == (1, 1, token, head_size),
                  f"token {token}: retained '{inp}' has shape {tuple(kept.shape)}")
            retained_bytes += kept.nbytes
            pointers[inp] = kept.data_ptr
            if inp in previous:
                old_ptr, old_bytes = previous[inp]
                check(np.array_equal(as_array(kept)[:, :, :token - 1], old_bytes),
                      f"token {token}: the valid prefix of '{inp}' changed")
                if stateful_storage["storage_reuse_count"] and not \
                        stateful_storage["storage_allocations"]:
                    check(kept.data_ptr == old_ptr, f"token {token}: reuse reported but "
                          f"'{inp}' moved from {old_ptr:#x} to {kept.data_ptr:#x}")
        check(retained_bytes == 4 * 2 * head_size * token,
              f"token {token}: retained_logical_bytes {retained_bytes}")
        # Keep only integers and private copies: a live view would block append reuse.
        previous = {inp: (pointers[inp], as_array(retained[inp]).copy()) for inp, _ in pairs}
        # Drop every view of this step (loop variables too) before the next run.
        del out, retained, plain, y, a, b, kept, returned

        step = {"token": token, "stateful_ns": stateful_ns, "stateless_ns": stateless_ns,
                "retained_logical_bytes": retained_bytes,
                "event_workspace_peak_bytes": stateful_storage.pop("event_workspace_peak_bytes")}
        step.update(stateful_storage)
        step["stateless_storage"] = {k: v for k, v in stateless_storage.items()
                                     if k != "event_workspace_peak_bytes"}
        step["checks"] = {"y_max_abs_error_vs_numpy": y_error,
                          "max_abs_diff_state_vs_stateless": side_error,
                          "retained_pointer_identity": True, "prefix_unchanged": token > 1}
        steps.append(step)

    state.close()
    return {
        "benchmark": "persistent_feedback",
        "revisions": revisions(target_ref),
        "model": model_identity(model),
        "fixture": {"head_size": head_size, "q_heads": 1, "kv_heads": 1, "dtype": "float32",
                    "tokens": tokens, "seed": seed, "tolerance": tolerance},
        "execution_policy": {
            "persistent_tensor_initial_capacity": capacity,
            "executor": options.executor, "intra_op_threads": options.intra_op_threads,
            "events_enabled": True, "timer": "time.perf_counter_ns, one observation per token",
            "stateless_feedback": "model.graph.persistent_bindings",
        },
        "environment": {"python": platform.python_version(), "platform": platform.platform(),
                        "cpu": cpu_model(), "cpu_count": os.cpu_count(),
                        "extension": sys.modules["onnx_light.onnx_py._onnxpykernels"].__file__},
        "setup_ns": {"stateful": stateful_setup_ns, "stateless_session": stateless_setup_ns},
        "steps": steps,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--head-size", type=int, default=2, help="Dk = Dv (default 2)")
    parser.add_argument("--capacity", type=int, default=32,
                        help="persistent_tensor_initial_capacity of the state (0 disables)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--target-ref", default="main",
                        help="git ref recorded as the target revision (default main)")
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.head_size < 1 or args.capacity < 0:
        parser.error("--tokens and --head-size must be >= 1, --capacity >= 0")
    try:
        result = run(args.tokens, args.head_size, args.capacity, args.seed, args.tolerance,
                     args.target_ref)
    except CheckFailed as e:
        print(f"bench_persistent_feedback: CHECK FAILED: {e}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
