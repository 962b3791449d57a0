"""One com.microsoft MultiHeadAttention call in onnx-light and onnxruntime on the same inputs,
2 threads, medians of --calls calls, --rounds rounds interleaved; onnx-light/onnxruntime
ratio per case. Cases (head size 64, batch 1): a prompt of 128 tokens without past (causal,
and with the builder's additive [1, N, S, S] attention_bias), and a decode step with 1024
past tokens (past fed, so both write the presents), at the SmolLM2 (9 heads) and Qwen2.5-0.5B
(14 heads) head counts; FLOAT and FLOAT16.

    PYTHONPATH=python:tests/python .venv/bin/python perf/bench_multi_head_attention.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from test_multi_head_attention import _feeds, _mha  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

CASES = {  # name: (feeds arguments, attributes)
    "prompt128 causal": ({"seq": 128}, {"unidirectional": 1}),
    "prompt128 bias": ({"seq": 128, "bias": (0, 1)}, {}),
    "decode past1024": ({"seq": 1, "past": 1024}, {}),
}


def median_us(fn, calls):
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def runners(heads, dtype, args, attrs):
    feeds = _feeds(np.random.default_rng(0), dtype, batch=1, heads=heads, h=64, **args)
    if "bias" in args:  # the builder's mask: 0 where visible, the type's minimum where not
        seq = args["seq"]
        hidden = np.triu(np.ones((seq, seq), bool), 1)
        feeds["attention_bias"] = np.where(hidden, np.finfo(dtype).min, 0).astype(dtype)[
            None, None].repeat(heads, 1)
    outputs = ("out", "present_key", "present_value") if "past_key" in feeds else ("out",)
    model = _mha(feeds, outputs, num_heads=heads, **attrs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    theirs = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"])
    ours = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    return (lambda: ours.run(context, feeds, output_names=list(outputs)),
            lambda: theirs.run(list(outputs), feeds))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    table = {(case, heads, np.dtype(dtype).name): runners(heads, dtype, *CASES[case])
             for case in CASES for heads in (9, 14) for dtype in (np.float32, np.float16)}
    for r in range(args.rounds):
        for (case, heads, dtype), (ours, theirs) in table.items():
            a, b = median_us(ours, args.calls), median_us(theirs, args.calls)
            print(f"round {r} {case:17s} {heads:2d} heads {dtype:7s}: onnx-light {a:8.0f} us, "
                  f"onnxruntime {b:8.0f} us, ratio {a / b:.2f}", flush=True)


if __name__ == "__main__":
    main()
