"""Decode steps on one state for a long time, resident memory watched (issue 16's soak).

One PersistentValueState of the tiny Llama exported with KV caches (caches bound, inline
executor) decodes greedily; every `--request` steps it is reset to empty caches and starts a new 8-token prompt (the
model has 256 positions), as a server's state would. The
resident set is read from /proc/self/statm after the warm-up requests and then every
`--report` steps; the run fails if it ever grows more than `--max-growth-mb` over the
warm-up figure.

    python tests/soak/decode_soak.py --steps 1000000
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from models import export_hf  # noqa: E402
from onnx_light import onnx as ol_onnx  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402
from resident import rss_mb  # noqa: E402

ARCH, SIZE = "llama", "tiny"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--request", type=int, default=120, help="decode steps per request")
    p.add_argument("--warmup-requests", type=int, default=4)
    p.add_argument("--report", type=int, default=100_000)
    p.add_argument("--max-growth-mb", type=float, default=1.0)
    args = p.parse_args()

    model = ol_onnx.load_model(export_hf.ensure(ARCH, with_cache=True, size=SIZE))
    export_hf.add_cache_bindings(model, export_hf.cache_shape(ARCH, SIZE)[0])
    empty = export_hf.empty_cache(ARCH, 1, SIZE)
    state = runtime.PersistentValueState(
        model, initial=empty, options=runtime.RuntimeSessionOptions(executor="inline"))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rng = np.random.default_rng(0)
    vocab = export_hf.vocab_size(ARCH, SIZE)

    steps, request, baseline, worst, start = 0, 0, None, 0.0, time.perf_counter()
    while steps < args.steps:
        state.reset(empty)
        ids = rng.integers(1, vocab, (1, 8), dtype=np.int64)
        position = 0
        for _ in range(args.request):
            feeds = {"input_ids": ids,
                     "attention_mask": np.ones((1, position + ids.shape[1]), np.int64),
                     "position_ids": np.arange(position, position + ids.shape[1],
                                               dtype=np.int64)[None]}
            out = state.run(context, feeds, output_names=["logits"])
            token = int(np.from_dlpack(out["logits"])[0, -1].argmax())
            del out
            position += ids.shape[1]
            ids = np.array([[token]], np.int64)
            steps += 1
            if baseline is not None and steps % args.report == 0:
                now = rss_mb()
                worst = max(worst, now - baseline)
                print(f"{steps} steps, {time.perf_counter() - start:.0f} s: RSS {now:.1f} MB "
                      f"({now - baseline:+.2f} MB over warm-up)", flush=True)
                if now - baseline > args.max_growth_mb:
                    sys.exit(f"RSS grew {now - baseline:.2f} MB, more than {args.max_growth_mb}")
        request += 1
        if request == args.warmup_requests:
            baseline = rss_mb()
            print(f"warm-up: {steps} steps, RSS {baseline:.1f} MB", flush=True)
    print(f"{steps} decode steps in {time.perf_counter() - start:.0f} s; RSS at most "
          f"{worst:+.2f} MB over warm-up")


if __name__ == "__main__":
    main()
