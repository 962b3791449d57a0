"""Runs racing a TaskCompletion.cancel from another thread (issue 16's race check).

Each run of a 4-node state (present = past + 4 * delta, 65,536 floats) gets a fresh
completion that a second thread cancels after a random spin (log-uniform lengths), so the
cancel lands before the run, between nodes, at publication or after it. Whatever the interleaving, exactly one of
two outcomes must hold, checked on every run:

  - the run returned: the completion is done and not cancelled, the canceller's cancel
    raised "completed", and the state holds old + 4 (every element) in the returned
    output's buffer;
  - the run raised CancelledError: the completion is cancelled, the canceller's cancel
    went through, and the state holds exactly the old values in the old buffer.

    python tests/soak/cancel_race.py --runs 100000
"""
from __future__ import annotations

import argparse
import collections
import random
import threading
import time

import numpy as np

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime

MODEL = (
    '<ir_version: 10, opset_import: ["" : 18]>'
    "chain (float[N] delta, float[N] past) => (float[N] present) {"
    " a = Add(past, delta) b = Add(a, delta) c = Add(b, delta) present = Add(c, delta) }")
N = 65536


def address(value) -> int:
    return np.from_dlpack(value).__array_interface__["data"][0]


def make_state():
    model = parser.parse_model(MODEL)
    binding = model.graph.persistent_bindings.add()
    binding.input_name, binding.output_name = "past", "present"
    return runtime.PersistentValueState(model, {"past": np.zeros(N, np.float32)})


def spins_per_run(state, context, delta) -> int:
    """Spin-loop iterations that last about one run. The races spin from 1/1000 of that to
    5 times it (log-uniform): a run with a thread spinning beside it on 2 cores is slower
    than alone, by how much depends on the machine, so no one length covers it."""
    start = time.perf_counter()
    for _ in range(20):
        state.run(context, {"delta": delta})
    run = (time.perf_counter() - start) / 20
    start = time.perf_counter()
    for _ in range(100_000):
        pass
    spin = (time.perf_counter() - start) / 100_000
    return max(2, int(run / spin))


def race(runs: int, seed: int = 0) -> collections.Counter:
    """`runs` raced runs; raises AssertionError on the first broken invariant."""
    state, context = make_state(), runtime.RuntimeContext(
        runtime.KernelContext(runtime.default_opset(18)))
    delta = np.ones(N, np.float32)
    rng = random.Random(seed)
    spins = spins_per_run(state, context, delta)
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    slot: dict = {}

    def canceller():
        while True:
            go.acquire()
            completion, spin = slot["completion"], slot["spin"]
            if completion is None:
                return
            # Spin in short pieces that let the GIL go (sleep(0)): a run needs the GIL to
            # finish, and a spin that held it would always cancel first.
            for _ in range(spin // 1024 + 1):
                for _ in range(min(spin, 1024)):
                    pass
                time.sleep(0)
            try:
                completion.cancel("raced")
                slot["cancel"] = "cancelled"
            except RuntimeError as e:
                assert "completed" in str(e), e
                slot["cancel"] = "too late"
            done.release()

    thread = threading.Thread(target=canceller, daemon=True)
    thread.start()
    outcomes = collections.Counter()
    expected = float(np.from_dlpack(state.values["past"])[0])
    try:
        for i in range(runs):
            old_address = address(state.values["past"])
            completion = runtime.TaskCompletion()
            slot.update(completion=completion, spin=int(spins * 10 ** rng.uniform(-3, 0.7)))
            go.release()
            try:
                out = state.run(context, {"delta": delta}, completion)
                outcome = "published"
            except runtime.CancelledError:
                out, outcome = None, "cancelled"
            done.acquire()
            past = state.values["past"]
            values = np.from_dlpack(past)
            if outcome == "published":
                expected += 4.0
                assert slot["cancel"] == "too late", f"run {i}: published and cancelled"
                assert completion.done and not completion.cancelled, f"run {i}"
                assert address(past) == address(out["present"]), f"run {i}: not the output"
            else:
                assert slot["cancel"] == "cancelled", f"run {i}: cancelled, cancel failed"
                assert completion.cancelled, f"run {i}"
                assert address(past) == old_address, f"run {i}: the old buffer was replaced"
            assert values.min() == expected and values.max() == expected, (
                f"run {i} ({outcome}): state holds {values.min()}..{values.max()}, "
                f"expected {expected}")
            outcomes[outcome] += 1
    finally:
        slot.update(completion=None, spin=0)
        go.release()
        thread.join()
    return outcomes


def main():
    parser_ = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser_.add_argument("--runs", type=int, default=100_000)
    parser_.add_argument("--seed", type=int, default=0)
    args = parser_.parse_args()
    start = time.perf_counter()
    outcomes = race(args.runs, args.seed)
    print(f"{args.runs} runs in {time.perf_counter() - start:.1f} s: "
          f"{outcomes['published']} published, {outcomes['cancelled']} cancelled, "
          "no run both or neither, every state exactly old or new")


if __name__ == "__main__":
    main()
