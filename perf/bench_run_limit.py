"""Cost of RuntimeSessionOptions.max_run_bytes on a decode step of the tiny demo decoder
(onnx_light.models.tiny_decoder): PersistentValueState.run of one token, logits only, with
the limit off (the default) and on (1 GiB, never reached), timed in alternating blocks in
the same process. On a build without the option only "off" is timed (a before/after
baseline: run this script against each build in turn).

    PYTHONPATH=python python perf/bench_run_limit.py [--steps 20000] [--block 500]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BUILT = os.path.join(REPO, "python", "onnx_light", "onnx_py")
if os.path.isdir(_BUILT) and any(f.startswith("_onnxpykernels") for f in os.listdir(_BUILT)):
    sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

CONFIG = TinyDecoderConfig()


def make_stepper(model, **options):
    """A state after a one-token prompt, and a function that runs its next decode step.
    Positions wrap before the model's limit by resetting the caches (outside the timing)."""
    session = runtime.RuntimeSession(model, runtime.RuntimeSessionOptions(**options))
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    state = runtime.PersistentValueState(session, empty_cache(CONFIG))
    position = [0]

    def step():
        if position[0] == CONFIG.max_positions:
            state.reset(empty_cache(CONFIG))
            position[0] = 0
        feeds = {"input_ids": np.array([[40]], np.int64),
                 "position_ids": np.array([[position[0]]], np.int64)}
        state.run(ctx, feeds, output_names=["logits"])
        position[0] += 1
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--block", type=int, default=500)
    args = parser.parse_args()
    model = build_tiny_decoder(config=CONFIG)
    steppers = {"off": make_stepper(model)}
    try:
        steppers["on (1 GiB)"] = make_stepper(model, max_run_bytes=1 << 30)
    except TypeError:
        print("this build has no max_run_bytes: timing the default only")
    samples = {name: [] for name in steppers}
    for step in steppers.values():  # warm-up: plans, packed weights, caches
        for _ in range(200):
            step()
    for _ in range(args.steps // args.block):
        for name, step in steppers.items():
            start = time.perf_counter_ns()
            for _ in range(args.block):
                step()
            samples[name].append((time.perf_counter_ns() - start) / args.block)
    for name, values in samples.items():
        print(f"{name:12s} median {np.median(values) / 1000:8.2f} us/step "
              f"(min {min(values) / 1000:.2f}, {len(values)} blocks of {args.block})")


if __name__ == "__main__":
    main()
