"""Where one decode step (and the prompt step) of a real-size exported decoder spends its time:
per-op and per-node kernel tables from the runtime's events, inline executor.

    PYTHONPATH=python .venv/bin/python perf/profile_real_decode.py [--shape smollm2]
        [--prompt 128] [--steps 16] [--threads 2] [--executor inline|flow] [--spin-wait-us N]
        [--exporter dynamo|torchscript] [--quantize dynamic|q4|fp16|q4f16|bnb4]
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
from onnx_light import onnx as ol_onnx, profiling  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

from bench_real_decode import SHAPES as ARCH, VARIANTS, Shape  # noqa: E402  (name -> architecture)


def step_feeds(ids, start):
    total = start + ids.shape[1]
    return {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2", choices=sorted(ARCH))
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--executor", default="inline")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--spin-wait-us", type=int,
                        default=runtime.RuntimeSessionOptions().spin_wait_us,
                        help="RuntimeSessionOptions.spin_wait_us (helpers spin between kernels)")
    parser.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo",
                        help="the export bench_real_decode.py --exporter runs (torchscript: "
                             "prepared with prepare_decoder(bind='auto'))")
    parser.add_argument("--quantize", choices=["none", *VARIANTS], default="none",
                        help="the converted export bench_real_decode.py --quantize runs")
    parser.add_argument("--no-events", action="store_true",
                        help="time the steps with events off (no tables): the events' own cost")
    args = parser.parse_args()
    arch = ARCH[args.shape]
    shape = Shape(args.shape, args.exporter, args.quantize)
    model = ol_onnx.load_model(shape.prepared or shape.path)
    if shape.prepared is None:
        export_hf.add_cache_bindings(model, shape.layers)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=not args.no_events)
    options = runtime.RuntimeSessionOptions(intra_op_threads=args.threads,
                                            spin_wait_us=args.spin_wait_us,
                                            executor=args.executor,
                                            persistent_tensor_initial_capacity=args.prompt + 64)
    state = runtime.PersistentValueState(model, initial=shape.empty_cache(),
                                         options=options)
    vocab = export_hf.vocab_size(arch, args.shape)
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt), dtype=np.int64)

    def request(steps):
        ids, start, marks, times = prompt, 0, [], []
        for _ in range(steps + 1):
            marks.append(len(context.events()))
            t0 = time.perf_counter()
            out = state.run(context, step_feeds(ids, start))
            times.append(time.perf_counter() - t0)
            token = int(np.from_dlpack(out["logits"])[0, -1].argmax())
            del out
            start += ids.shape[1]
            ids = np.array([[token]], np.int64)
        marks.append(len(context.events()))
        return marks, times

    state.reset(shape.empty_cache())
    request(2)  # warm-up: packs, buffers
    state.reset(shape.empty_cache())
    context.clear_events()
    marks, times = request(args.steps)
    events = context.events()
    print(f"{args.shape}, prompt {args.prompt}: prompt step {times[0] * 1e3:.1f} ms, decode "
          f"p50 {np.median(times[1:]) * 1e3:.2f} ms over {args.steps} steps "
          f"({args.threads} threads, {args.executor})")
    if args.no_events:
        return
    print("\nprompt step, by op:")
    print(profiling.format_table(profiling.op_table(events[marks[0]:marks[1]])[:args.top]))
    decode = events[marks[1]:marks[-1]]
    kernel_ms = sum(e.duration_ns for e in decode
                    if e.action == runtime.RuntimeEventAction.kKernel) / 1e6 / args.steps
    print(f"decode: mean step {np.mean(times[1:]) * 1e3:.2f} ms, of which kernels "
          f"{kernel_ms:.2f} ms")
    print(f"\ndecode step (mean of {args.steps}), by op:")
    print(profiling.format_table(profiling.op_table(decode, runs=args.steps)[:args.top]))
    print(f"\ndecode step, by node:")
    print(profiling.format_table(profiling.node_table(decode, runs=args.steps, top=args.top)))


if __name__ == "__main__":
    main()
