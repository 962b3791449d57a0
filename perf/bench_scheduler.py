"""Scheduler scaling: throughput (generated tokens/s) of 8 concurrent requests against the
same 8 requests one at a time, greedy, on the built-in demo model (the tiny decoder of
`python -m onnx_light.demo`), in the same process. Also checks every request's tokens equal
runtime.generate alone.

    PYTHONPATH=python .venv/bin/python perf/bench_scheduler.py [--tokens 64] [--repeats 3]

Rows: runtime.generate called 8 times in a row; the scheduler with max_in_flight=1 (one at
a time, FIFO); the scheduler with max_in_flight=8 (all at once, round-robin steps).
Best of --repeats runs each.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime

CONFIG = TinyDecoderConfig()
REQUESTS = 8


def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, CONFIG.vocab_size, size=8).tolist() for _ in range(REQUESTS)]


def feeds(prompt):
    return {"input_ids": np.array([prompt], np.int64), **empty_cache(CONFIG)}


def sequential(model, context, options, ps):
    t0 = time.perf_counter()
    out = [np.from_dlpack(runtime.generate(model, context, feeds(p), options)) for p in ps]
    return time.perf_counter() - t0, out, None


def scheduled(model, context, options, ps, in_flight):
    scheduler = runtime.RequestScheduler(context, max_in_flight=in_flight)
    t0 = time.perf_counter()
    handles = [scheduler.submit(model, feeds(p), options) for p in ps]
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

    rows = [("runtime.generate x8, in a row", lambda: sequential(model, context, options, ps)),
            ("scheduler, max_in_flight=1", lambda: scheduled(model, context, options, ps, 1)),
            ("scheduler, max_in_flight=8", lambda: scheduled(model, context, options, ps, 8))]
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
    print(f"{'mode':32} {'tokens/s':>10} {'wall ms':>9} {'mean TTFT ms':>13} "
          f"{'p50 token ms':>13}")
    for name, (elapsed, stats) in results.items():
        ttft = p50 = "-"
        if stats:
            ttft = f"{np.mean([s['time_to_first_token_ns'] for s in stats]) / 1e6:.2f}"
            p50 = f"{np.median(np.concatenate([s['token_latency_ns'] for s in stats])) / 1e6:.3f}"
        print(f"{name:32} {total / elapsed:10.0f} {elapsed * 1e3:9.1f} {ttft:>13} {p50:>13}")
    one = results["scheduler, max_in_flight=1"][0]
    eight = results["scheduler, max_in_flight=8"][0]
    print(f"throughput ratio, 8 in flight / 1 at a time: {one / eight:.2f}x "
          "(all tokens identical to runtime.generate alone)")


if __name__ == "__main__":
    main()
