"""MatMulNBits decode GEMV (M = 1, 4 bits, block 32, no zero points: what the genai builder's
int4 CPU build writes) on the real decoder shapes, onnx-light against onnxruntime on the same
one-node model in the same run, rounds interleaved; and against the bandwidth bound of the
packed bytes (4-bit weights + float scales) at the machine's read rate.

    PYTHONPATH=python python perf/bench_matmul_nbits.py [--threads 2] [--rounds 5] [--calls 200]
        [--m 1]

--m 128 times a prompt's rows instead of one decode row (the "bound" column then still
counts the weight's bytes only).

Shapes: SmolLM2-135M's MLP up/gate (K=576, N=1536), Qwen2.5-0.5B's (K=896, N=4864), and
SmolLM2's LM head (K=576, N=49152). onnxruntime runs at accuracy_level 4 (the builder's:
activations quantized to int8, integer dot products; onnx-light does the same, NBitsCompute::
kInt8) and at 0 (float).
Times are medians of `calls` session calls per round, best round; each includes one call's
Python and session overhead (measured on a 1x1 MatMulNBits and printed)."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from bench_real_decode import read_bandwidth  # noqa: E402

from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

SHAPES = [("smollm2 mlp", 576, 1536), ("qwen05 mlp", 896, 4864), ("smollm2 lm_head", 576, 49152)]
BLOCK = 32


def model(k, n, accuracy_level):
    rng = np.random.default_rng(k + n)
    blocks = -(-k // BLOCK)
    b = rng.integers(0, 256, (n, blocks, BLOCK // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, n * blocks).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=BLOCK, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                helper.make_opsetid("com.microsoft", 1)])
    return m, b.nbytes + scales.nbytes


def engines(k, n, threads):
    """name -> callable(A) for onnx-light and onnxruntime (levels 4 and 0)."""
    out = {}
    m, _ = model(k, n, 4)
    session = runtime.RuntimeSession(m, runtime.RuntimeSessionOptions(intra_op_threads=threads))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    out["onnx-light"] = lambda a: np.from_dlpack(session.run(context, {"A": a})["Y"])
    for level in (4, 0):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        s = ort.InferenceSession(model(k, n, level)[0].SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
        out[f"onnxruntime level {level}"] = (lambda s: lambda a: s.run(None, {"A": a})[0])(s)
    return out


def median_us(fn, a, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(a)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--m", type=int, default=1, help="rows of A (1: decode)")
    args = parser.parse_args()
    gbps = read_bandwidth(args.threads)
    print(f"read rate {gbps:.1f} GB/s ({args.threads} threads, 1 GiB float32 max)")
    overhead = engines(BLOCK, 1, args.threads)
    a1 = np.ones((1, 1, BLOCK), np.float32)
    print("call overhead (K=32, N=1): " + ", ".join(
        f"{name} {median_us(fn, a1, args.calls):.1f} us" for name, fn in overhead.items()))
    print(f"{'shape':<16} {'K':>5} {'N':>6} {'packed MB':>9} {'bound us':>9} "
          f"{'onnx-light':>11} {'ort lvl4':>9} {'ort lvl0':>9} {'ol/ort4':>8} {'bound/ol':>9}")
    for name, k, n in SHAPES:
        _, packed = model(k, n, 4)
        fns = engines(k, n, args.threads)
        a = np.random.default_rng(0).standard_normal((1, args.m, k)).astype(np.float32)
        # Both run int8 activations at level 4: onnx-light within twice onnxruntime's own
        # distance from the float product.
        reference, level4 = fns["onnxruntime level 0"](a), fns["onnxruntime level 4"](a)
        own = np.abs(level4 - reference).max()
        assert np.abs(fns["onnx-light"](a) - reference).max() <= 2 * own + 1e-4 * np.abs(reference).max()
        best = {e: float("inf") for e in fns}
        for _ in range(args.rounds):
            for e, fn in fns.items():
                best[e] = min(best[e], median_us(fn, a, args.calls))
        bound = packed / gbps / 1e3
        ol, o4, o0 = best["onnx-light"], best["onnxruntime level 4"], best["onnxruntime level 0"]
        print(f"{name:<16} {k:>5} {n:>6} {packed / 1e6:>9.2f} {bound:>9.1f} {ol:>9.1f}us "
              f"{o4:>7.1f}us {o0:>7.1f}us {ol / o4:>8.2f} {bound / ol:>9.2f}")


if __name__ == "__main__":
    main()
