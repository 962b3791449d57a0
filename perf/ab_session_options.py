"""Interleaved A/B of RuntimeSessionOptions on a real-size exported decoder: one model, one
state per variant, the same prompt, rounds alternating between the variants so a host whose
speed swings from minute to minute affects them alike. Prints decode p50 per round.

    PYTHONPATH=python .venv/bin/python perf/ab_session_options.py [--shape smollm2]
        [--prompt 128] [--steps 48] [--rounds 6] spin_wait_us=0 spin_wait_us=1000
"""
from __future__ import annotations

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import numpy as np  # noqa: E402

from models import export_hf  # noqa: E402
from onnx_light import onnx as ol_onnx  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

ARCH = {"smollm2": "llama", "qwen05": "qwen2"}


def parse_variant(text: str) -> dict:
    """'spin_wait_us=0,executor=inline' -> {'spin_wait_us': 0, 'executor': 'inline'}."""
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2", choices=sorted(ARCH))
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("variants", nargs="+", help="option=value[,option=value] per variant")
    args = parser.parse_args()
    arch = ARCH[args.shape]
    path = export_hf.ensure(arch, with_cache=True, size=args.shape)
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape(arch, args.shape)[0])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=False)
    empty = export_hf.empty_cache(arch, 1, args.shape)
    states = []
    for text in args.variants:
        options = dict(intra_op_threads=args.threads, executor="inline",
                       persistent_tensor_initial_capacity=args.prompt + args.steps + 8)
        options.update(parse_variant(text))
        states.append(runtime.PersistentValueState(
            model, initial=empty, options=runtime.RuntimeSessionOptions(**options)))
    vocab = export_hf.vocab_size(arch, args.shape)
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt), dtype=np.int64)

    def decode_p50(state, steps):
        state.reset(export_hf.empty_cache(arch, 1, args.shape))
        ids, start, times, tokens = prompt, 0, [], []
        for _ in range(steps + 1):
            total = start + ids.shape[1]
            feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
                     "position_ids": np.arange(start, total, dtype=np.int64)[None]}
            t0 = time.perf_counter()
            out = state.run(context, feeds)
            times.append(time.perf_counter() - t0)
            tokens.append(int(np.from_dlpack(out["logits"])[0, -1].argmax()))
            del out
            start, ids = total, np.array([[tokens[-1]]], np.int64)
        return float(np.median(times[1:]) * 1e3), tokens

    for state in states:
        decode_p50(state, 2)  # warm-up: packs, buffers
    results = [[] for _ in states]
    for _ in range(args.rounds):
        round_tokens = []
        for state, res in zip(states, results):
            p50, tokens = decode_p50(state, args.steps)
            res.append(p50)
            round_tokens.append(tokens)
        same = all(t == round_tokens[0] for t in round_tokens)
        print("  ".join(f"{v}: {r[-1]:.2f}" for v, r in zip(args.variants, results)),
              "ms" + ("" if same else "  (tokens differ!)"), flush=True)
    print("median", "  ".join(f"{v}: {np.median(r):.2f}" for v, r in zip(args.variants, results)),
          "ms")


if __name__ == "__main__":
    main()
