"""64 concurrent generation requests through the RequestScheduler for a long time, every
request's tokens checked and resident memory watched (issue 16's scheduler soak).

The demo decoder (`python -m onnx_light.demo`'s model) serves a sliding window of
`--in-flight` requests: when the oldest finishes, its tokens are compared with
runtime.generate's for the same prompt (computed alone beforehand; any lost, duplicated or
foreign token fails the run) and a new request takes its place. Prompts cycle through
`--prompts` different ones of different lengths, with different max_new_tokens. The resident
set is read after the warm-up minute and then every `--report` seconds; the run fails if it
grows more than `--max-growth-mb`.

    python tests/soak/scheduler_soak.py --minutes 10
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime
from resident import rss_mb



def threads() -> int:
    """The process's threads: a worker the arena starts late brings its own stack and malloc
    arena, a step in RSS that is not a leak."""
    return len(os.listdir("/proc/self/task"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--warmup-seconds", type=float, default=60.0)
    p.add_argument("--report", type=float, default=60.0)
    p.add_argument("--max-growth-mb", type=float, default=1.0)
    args = p.parse_args()

    config = TinyDecoderConfig()
    model = build_tiny_decoder(config=config)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    rng = np.random.default_rng(11)
    requests = []
    for i in range(args.prompts):
        prompt = rng.integers(0, config.vocab_size, size=int(rng.integers(1, 24))).tolist()
        options = runtime.GenerationOptions(max_new_tokens=int(rng.integers(4, 48)))
        feeds = {"input_ids": np.array([prompt], np.int64), **empty_cache(config)}
        expected = np.from_dlpack(runtime.generate(model, context, feeds, options)).copy()
        requests.append((feeds, options, expected))

    scheduler = runtime.RequestScheduler(context, max_in_flight=args.in_flight)
    window = collections.deque()
    submitted = checked = tokens = 0

    def submit():
        nonlocal submitted
        feeds, options, expected = requests[submitted % len(requests)]
        window.append((scheduler.submit(model, feeds, options), expected))
        submitted += 1

    for _ in range(args.in_flight):
        submit()
    start = time.perf_counter()
    end = start + 60 * args.minutes
    baseline = worst = None
    next_report = start + args.warmup_seconds
    while time.perf_counter() < end:
        handle, expected = window.popleft()
        got = np.from_dlpack(handle.result())
        if not np.array_equal(got, expected):
            sys.exit(f"request {checked}: tokens {got.tolist()} differ from generate's "
                     f"{expected.tolist()}")
        checked += 1
        tokens += expected.shape[1]
        submit()
        now = time.perf_counter()
        if now >= next_report:
            rss = rss_mb()
            if baseline is None:
                baseline, worst = rss, 0.0
                print(f"warm-up: {checked} requests, RSS {rss:.1f} MB, {threads()} threads",
                      flush=True)
            else:
                worst = max(worst, rss - baseline)
                print(f"{now - start:.0f} s: {checked} requests, {tokens} tokens checked, "
                      f"RSS {rss:.1f} MB ({rss - baseline:+.2f}), {threads()} threads", flush=True)
                if rss - baseline > args.max_growth_mb:
                    sys.exit(f"RSS grew {rss - baseline:.2f} MB over warm-up")
            next_report = now + args.report
    for handle, expected in window:
        assert np.array_equal(np.from_dlpack(handle.result()), expected)
        checked += 1
    print(f"{checked} requests ({args.in_flight} in flight) in "
          f"{time.perf_counter() - start:.0f} s, every token equal to generate alone; RSS "
          f"at most {worst if worst is not None else float('nan'):+.2f} MB over warm-up; "
          f"peak in flight {scheduler.peak_in_flight}")


if __name__ == "__main__":
    main()
