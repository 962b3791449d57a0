"""Side-by-side timings of onnx-light and onnxruntime on the same models, in one process:
per-call overhead on a one-node graph, MatMul GFLOP/s, decode-shaped MatMul GB/s against
memcpy bandwidth, and the flow-graph executor against the inline one on a wide graph.

    PYTHONPATH=. python perf/bench_vs_onnxruntime.py [--json OUT]

Ratios are measured side by side in this run (shared machines are noisy: compare within a
run, not across runs). Medians of repeated timed calls.
"""
from __future__ import annotations

import argparse
import json
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
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from onnx_light import onnx as ol  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402


def median_ns(fn, repeat: int) -> float:
    for _ in range(max(3, repeat // 10)):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return float(np.median(samples))


def both(model: onnx.ModelProto, feeds: dict, repeat: int, executor: str = "auto"):
    ours = ol.from_onnx(model)
    options = runtime.RuntimeSessionOptions()
    options.executor = executor
    session = runtime.RuntimeSession(ours, options)
    context = runtime.RuntimeContext(runtime.KernelContext({o.domain: o.version for o in model.opset_import}))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.from_dlpack(next(iter(session.run(context, feeds).values())))
    b = theirs.run(None, feeds)[0]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return (median_ns(lambda: session.run(context, feeds), repeat),
            median_ns(lambda: theirs.run(None, feeds), repeat))


def matmul_model(m: int, k: int, n: int) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [onnx.numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def wide_model(branches: int, size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes, inits, outs = [], [], []
    for i in range(branches):
        inits.append(onnx.numpy_helper.from_array(
            rng.standard_normal((size, size)).astype(np.float32) / size, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"h{i}"]))
        nodes.append(helper.make_node("Tanh", [f"h{i}"], [f"t{i}"]))
        outs.append(f"t{i}")
    acc = outs[0]
    for i, o in enumerate(outs[1:]):
        nodes.append(helper.make_node("Add", [acc, o], [f"s{i}"]))
        acc = f"s{i}"
    nodes.append(helper.make_node("Identity", [acc], ["y"]))
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}

    add = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    feeds = {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}
    ours, theirs = both(add, feeds, 20000)
    results["one_node_add_call_ns"] = {"onnx_light": ours, "onnxruntime": theirs, "ratio": ours / theirs}

    for size in (256, 1024):
        x = np.random.default_rng(2).standard_normal((size, size)).astype(np.float32)
        ours, theirs = both(matmul_model(size, size, size), {"x": x}, 30 if size == 1024 else 300)
        flops = 2.0 * size ** 3
        results[f"matmul_{size}_gflops"] = {"onnx_light": flops / ours, "onnxruntime": flops / theirs,
                                            "ratio": theirs / ours}

    k, n = 4096, 4096
    x = np.random.default_rng(3).standard_normal((1, k)).astype(np.float32)
    ours, theirs = both(matmul_model(1, k, n), {"x": x}, 200)
    weight_bytes = 4.0 * k * n
    src = np.ones(k * n, np.float32)
    dst = np.empty_like(src)
    copy_ns = median_ns(lambda: np.copyto(dst, src), 50)
    results["gemv_1x4096x4096_gbps"] = {"onnx_light": weight_bytes / ours, "onnxruntime": weight_bytes / theirs,
                                        "memcpy_read_gbps": weight_bytes / copy_ns, "ratio": theirs / ours}

    wide = wide_model(8, 192)
    x = np.random.default_rng(4).standard_normal((192, 192)).astype(np.float32)
    inline, _ = both(wide, {"x": x}, 200, executor="inline")
    flow, theirs = both(wide, {"x": x}, 200, executor="flow_graph")
    results["wide_graph_ns"] = {"inline": inline, "flow_graph": flow, "onnxruntime": theirs,
                                "flow_graph_speedup": inline / flow}

    for key, value in results.items():
        print(f"{key:>26}: " + ", ".join(f"{k}={v:.3g}" for k, v in value.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
