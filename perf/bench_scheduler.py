"""Scheduler scaling: throughput (generated tokens/s) of 8 concurrent requests against the
same 8 requests one at a time, greedy, on the built-in demo model (the tiny decoder of
`python -m onnx_light.demo`), in the same process. Also checks every request's tokens equal
runtime.generate alone.

    PYTHONPATH=. python perf/bench_scheduler.py [--tokens 64] [--repeats 3]

Rows: runtime.generate called 8 times in a row; the scheduler with max_in_flight=1 (one at
a time, FIFO); the scheduler with max_in_flight=8 (all at once, round-robin steps); each
with the default sessions (every core inside one model call) and with intra_op_threads=1
(parallelism only across requests). Best of --repeats runs each. The machines are shared:
compare rows of one run, not runs.
"""
from __future__ import annotations

import argparse
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

from onnx_light.models.tiny_decoder import (  # noqa: E402
    TinyDecoderConfig, build_tiny_decoder, empty_cache)
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

CONFIG = TinyDecoderConfig()
REQUESTS = 8


def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, CONFIG.vocab_size, size=8).tolist() for _ in range(REQUESTS)]


def feeds(prompt):
    return {"input_ids": np.array([prompt], np.int64), **empty_cache(CONFIG)}


def sequential(model, context, options, ps, session=None):
    t0 = time.perf_counter()
    out = [np.from_dlpack(runtime.generate(model, context, feeds(p), options, session))
           for p in ps]
    return time.perf_counter() - t0, out, None


def scheduled(model, context, options, ps, in_flight, session=None):
    scheduler = runtime.RequestScheduler(context, max_in_flight=in_flight)
    t0 = time.perf_counter()
    handles = [scheduler.submit(model, feeds(p), options, session) for p in ps]
    out = [np.from_dlpack(h.result()) for h in handles]
    elapsed = time.perf_counter() - t0
    stats = [h.stats() for h in handles]
    assert scheduler.peak_in_flight <= in_flight
    return elapsed, out, stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model = build_tiny_decoder(config=CONFIG)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    options = runtime.GenerationOptions(max_new_tokens=args.tokens)
    ps = prompts()
    _, reference, _ = sequential(model, context, options, ps)  # warm-up and expected tokens

    # Sessions either use every core inside each model call (the default) or one thread per
    # call, leaving the parallelism to the scheduler's concurrent requests.
    one = runtime.RuntimeSessionOptions(intra_op_threads=1)
    rows = [("generate x8 in a row", lambda: sequential(model, context, options, ps)),
            ("in_flight=1", lambda: scheduled(model, context, options, ps, 1)),
            ("in_flight=8", lambda: scheduled(model, context, options, ps, 8)),
            ("generate x8 in a row, 1 thread/call",
             lambda: sequential(model, context, options, ps, one)),
            ("in_flight=1, 1 thread/call", lambda: scheduled(model, context, options, ps, 1, one)),
            ("in_flight=8, 1 thread/call", lambda: scheduled(model, context, options, ps, 8, one))]
    results = {}
    for name, run in rows:
        best = None
        for _ in range(args.repeats):
            elapsed, out, stats = run()
            for got, want in zip(out, reference):
                np.testing.assert_array_equal(got, want)
            if best is None or elapsed < best[0]:
                best = (elapsed, stats)
        results[name] = best

    total = REQUESTS * args.tokens
    print(f"{REQUESTS} requests x {args.tokens} new tokens, prompt 8, greedy, tiny decoder "
          f"({CONFIG.num_layers} layers, hidden {CONFIG.hidden_size}), {os.cpu_count()} cores")
    print(f"{'mode':36} {'tokens/s':>10} {'wall ms':>9} {'mean TTFT ms':>13} "
          f"{'p50 token ms':>13}")
    for name, (elapsed, stats) in results.items():
        ttft = p50 = "-"
        if stats:
            ttft = f"{np.mean([s['time_to_first_token_ns'] for s in stats]) / 1e6:.2f}"
            p50 = f"{np.median(np.concatenate([s['token_latency_ns'] for s in stats])) / 1e6:.3f}"
        print(f"{name:36} {total / elapsed:10.0f} {elapsed * 1e3:9.1f} {ttft:>13} {p50:>13}")
    for suffix in ("", ", 1 thread/call"):
        ratio = results["in_flight=1" + suffix][0] / results["in_flight=8" + suffix][0]
        print(f"throughput ratio, 8 in flight / 1 at a time{suffix}: {ratio:.2f}x")
    print("(every request's tokens identical to runtime.generate alone)")


if __name__ == "__main__":
    main()
