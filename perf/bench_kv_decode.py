"""Per-token KV-cache decode through one opset-23 Attention node, side by side in one run:
onnx-light PersistentValueState with append capacity on (default 32) and off (0), and
onnxruntime running the same Attention model with its present outputs fed back as OrtValues.
Plus the Attention kernel's read bandwidth against a memcpy of the same bytes.

    PYTHONPATH=. python perf/bench_kv_decode.py [--heads 1 8 32] [--cached 128 1024 4096]
                                                [--head-size 64] [--json OUT]

For each (KV heads H, cached tokens L): the caches start as [1, H, L, D] FLOAT arrays and
every step appends one token (q = k = v heads = H, one query). The three decoders advance in
lock step on the same inputs (their outputs are compared at every step) and take turns
running first, so that machine noise hits them alike; the first steps are warm-up (the
state's first append after import allocates its own buffer, spec "Reuse is deliberately
conservative"). Reported per token: the best step time of the measured steps (the JSON also
has the median: on a loaded 2-core machine single steps stall for milliseconds, and the best
time is the estimate of the unloaded cost) and the mean bytes the Attention kernel copied
into K/V storage, from its kPersistentStorage events (prefix + append). onnxruntime reports
no such counters: its column is the dense-concatenation volume 4*H*(L+1)*(Dk+Dv), "est".

Attention read bandwidth: K+V bytes (4*H*L*(Dk+Dv)) over the best time of a stateless run
of the same node without present outputs (the kernel reads the caches in place and writes
no cache), divided by the bandwidth of numpy.copyto of the same bytes (best of repeated
calls), both in this run. memcpy moves each byte in and out; the fraction compares bytes
consumed per second.
Shared machines are noisy: compare within one run, never across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from onnx_light import onnx as ol  # noqa: E402

COUNTERS = ("storage_allocations", "storage_allocated_bytes", "storage_prefix_copied_bytes",
            "storage_append_copied_bytes", "storage_reuse_count")


def attention_onnx(heads: int, head_size: int, with_present: bool = True) -> onnx.ModelProto:
    d = head_size
    outputs = ["y", "present_key", "present_value"] if with_present else ["y"]
    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v", "", "past_key", "past_value"], outputs,
                          name="attention")],
        "kv_decode",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, heads, 1, d])
         for n in ("q", "k", "v")] +
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, heads, "past", d])
         for n in ("past_key", "past_value")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, 1, d])] +
        ([helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, heads, "total", d])
          for n in ("present_key", "present_value")] if with_present else []))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def bound_model(heads: int, head_size: int):
    model = ol.from_onnx(attention_onnx(heads, head_size))
    for inp, out in (("past_key", "present_key"), ("past_value", "present_value")):
        b = model.graph.persistent_bindings.add()
        b.input_name, b.output_name = inp, out
    return model


def best_ns(fn, repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return float(np.min(samples))


class OnnxLight:
    def __init__(self, heads, head_size, capacity, initial, opsets):
        options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=capacity)
        self.state = runtime.PersistentValueState(bound_model(heads, head_size), initial=initial,
                                                  options=options)
        self.context = runtime.RuntimeContext(opsets, events_enabled=True)

    def step(self, feeds):
        self.context.clear_events()
        t0 = time.perf_counter_ns()
        out = self.state.run(self.context, feeds)
        ns = time.perf_counter_ns() - t0
        # Copy y out and drop every output view: a live view would block append reuse.
        y = np.array(np.from_dlpack(out["y"]))
        del out
        events = [e for e in self.context.events()
                  if e.action == runtime.RuntimeEventAction.kPersistentStorage]
        counters = {c: int(sum(getattr(e, c) for e in events)) for c in COUNTERS}
        counters["storage_events"] = len(events)
        return ns, y, counters


class OnnxRuntime:
    def __init__(self, heads, head_size, initial):
        so = ort.SessionOptions()
        so.intra_op_num_threads = os.cpu_count() or 1
        self.session = ort.InferenceSession(attention_onnx(heads, head_size).SerializeToString(),
                                            so, providers=["CPUExecutionProvider"])
        self.past = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in initial.items()}
        self.names = ["y", "present_key", "present_value"]

    def step(self, feeds):
        t0 = time.perf_counter_ns()
        inputs = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        inputs.update(self.past)
        y, key, value = self.session.run_with_ort_values(self.names, inputs)
        self.past = {"past_key": key, "past_value": value}  # fed back without a copy
        ns = time.perf_counter_ns() - t0
        return ns, y.numpy().copy(), None


def read_bandwidth(heads, head_size, initial, opsets, repeat):
    """K+V bytes per second of a run that only reads the caches, and of numpy.copyto."""
    session = runtime.RuntimeSession(ol.from_onnx(attention_onnx(heads, head_size, False)))
    context = runtime.RuntimeContext(opsets)
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal((1, heads, 1, head_size)).astype(np.float32)
             for n in ("q", "k", "v")}
    feeds.update(initial)
    attention_ns = best_ns(lambda: session.run(context, feeds), repeat)
    src = np.concatenate([initial["past_key"].ravel(), initial["past_value"].ravel()])
    dst = np.empty_like(src)
    copy_ns = best_ns(lambda: np.copyto(dst, src), repeat)
    return src.nbytes / attention_ns, src.nbytes / copy_ns  # bytes per ns == GB/s


def measure(heads, cached, head_size, steps, warmup, tolerance, opsets):
    rng = np.random.default_rng(heads * 100003 + cached)
    shape = (1, heads, cached, head_size)
    initial = {"past_key": rng.standard_normal(shape).astype(np.float32),
               "past_value": rng.standard_normal(shape).astype(np.float32)}
    decoders = {
        "capacity_on": OnnxLight(heads, head_size, 32, initial, opsets),
        "capacity_off": OnnxLight(heads, head_size, 0, initial, opsets),
        "onnxruntime": OnnxRuntime(heads, head_size, initial),
    }
    times = {k: [] for k in decoders}
    page_faults = {k: [] for k in decoders}  # minor faults: fresh pages touched per step
    copied = {k: [] for k in decoders if k != "onnxruntime"}
    allocations = {k: [] for k in copied}
    have_events = True
    for i in range(warmup + steps):
        feeds = {n: rng.standard_normal((1, heads, 1, head_size)).astype(np.float32)
                 for n in ("q", "k", "v")}
        ys = {}
        order = list(decoders)
        order = order[i % 3:] + order[:i % 3]  # nobody always runs first after the feeds
        for name in order:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            ns, ys[name], counters = decoders[name].step(feeds)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            if i < warmup:
                continue
            times[name].append(ns)
            page_faults[name].append(faults)
            if counters is not None:
                have_events &= counters["storage_events"] > 0
                copied[name].append(counters["storage_prefix_copied_bytes"] +
                                    counters["storage_append_copied_bytes"])
                allocations[name].append(counters["storage_allocations"])
        for name, y in ys.items():
            diff = float(np.max(np.abs(y - ys["onnxruntime"])))
            if diff > tolerance:
                raise SystemExit(f"H={heads} L={cached} step {i}: {name} y differs from "
                                 f"onnxruntime by {diff} (tolerance {tolerance})")
    attn_gbps, copy_gbps = read_bandwidth(heads, head_size, initial, opsets,
                                          repeat=max(5, steps))
    row = {"kv_heads": heads, "cached_tokens": cached, "head_size": head_size,
           "steps": steps, "warmup": warmup,
           "kv_bytes": 4 * heads * cached * 2 * head_size,
           "onnxruntime_est_copied_bytes_per_token": 4 * heads * (cached + 1) * 2 * head_size,
           "attention_read_gbps": attn_gbps, "memcpy_gbps": copy_gbps,
           "attention_read_fraction_of_memcpy": attn_gbps / copy_gbps,
           "storage_events_reported": have_events}
    for name in decoders:
        row[f"{name}_ns"] = float(np.min(times[name]))
        row[f"{name}_median_ns"] = float(np.median(times[name]))
        row[f"{name}_minor_page_faults_per_token"] = float(np.mean(page_faults[name]))
    for name in copied:
        row[f"{name}_copied_bytes_per_token"] = float(np.mean(copied[name]))
        row[f"{name}_allocations_per_token"] = float(np.mean(allocations[name]))
    return row


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def table(rows) -> str:
    lines = [
        "| KV heads | cached | cap on us | cap on copied | cap off us | cap off copied | "
        "ORT us | ORT copied (est) | on/ORT | off/ORT | attn GB/s | memcpy GB/s | attn/memcpy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        def copied(name):
            if not r["storage_events_reported"]:
                return "n/a (no events)"
            return human_bytes(r[f"{name}_copied_bytes_per_token"])
        lines.append(
            f"| {r['kv_heads']} | {r['cached_tokens']} | {r['capacity_on_ns'] / 1e3:.1f} | "
            f"{copied('capacity_on')} | {r['capacity_off_ns'] / 1e3:.1f} | "
            f"{copied('capacity_off')} | {r['onnxruntime_ns'] / 1e3:.1f} | "
            f"{human_bytes(r['onnxruntime_est_copied_bytes_per_token'])} | "
            f"{r['capacity_on_ns'] / r['onnxruntime_ns']:.2f} | "
            f"{r['capacity_off_ns'] / r['onnxruntime_ns']:.2f} | "
            f"{r['attention_read_gbps']:.1f} | {r['memcpy_gbps']:.1f} | "
            f"{r['attention_read_fraction_of_memcpy']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--cached", type=int, nargs="+", default=[128, 1024, 4096])
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=None,
                        help="measured steps per configuration (default: 24, fewer for "
                             "large caches)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--json", default=None, help="write the rows and environment here")
    args = parser.parse_args(argv)
    opsets = runtime.KernelContext(runtime.default_opset(23))
    rows = []
    started = time.perf_counter()
    for heads in args.heads:
        for cached in args.cached:
            # Keep the default run short on 2 cores: fewer steps for big caches.
            volume = heads * cached
            steps = args.steps or (48 if volume <= 8192 else 32 if volume <= 32768 else 16)
            rows.append(measure(heads, cached, args.head_size, steps, args.warmup,
                                args.tolerance, opsets))
            print(f"  measured H={heads} L={cached} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": {"python": platform.python_version(),
                                       "platform": platform.platform(),
                                       "cpu_count": os.cpu_count(),
                                       "onnxruntime": ort.__version__,
                                       "date_utc": time.strftime("%Y-%m-%d %H:%M",
                                                                 time.gmtime())},
                       "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
