"""Chunked prefill: a prompt fed in chunks of several tokens to one state, onnx-light against
onnxruntime (KV cache fed back), same process, runners interleaved per repeat.

Every chunk multiplies each weight by several rows (M > 1). Chunk 1 runs on a fresh plan (B
packed per call), chunk 2 keeps a packed copy of each constant weight (ops/math/
constant_weight.h), later chunks reuse it: what a long-lived state or session doing several
prefills (or batched decode) sees. onnxruntime's session is built once and prepacks its
weights when it is created. All runners must produce the same argmax tokens (checked).

    .venv/bin/python perf/bench_prefill.py [--llama-size bench] [--chunk 16] [--chunks 6]
        [--repeats 7] [--threads 0]
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
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import bench_generation as bg  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402


def feeds_for(case, ids, chunk_index, chunk):
    start = chunk_index * chunk
    return bg.step_feeds(case, ids[:, start:start + chunk],
                         np.ones((1, start + chunk), np.int64), start)


def run_light(case, ids, chunks, chunk, threads):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(case.opset)))
    state = runtime.PersistentValueState(
        case.bound_model, initial=case.caches(),
        options=runtime.RuntimeSessionOptions(intra_op_threads=threads))
    times, tokens = [], []
    for i in range(chunks):
        t0 = time.perf_counter()
        logits = np.from_dlpack(state.run(context, feeds_for(case, ids, i, chunk))["logits"])
        times.append(time.perf_counter() - t0)
        tokens.append(int(logits[0, -1].argmax()))
    return times, tokens


def run_ort(case, session, ids, chunks, chunk):
    names = [o.name for o in session.get_outputs()]
    cache = case.caches()
    times, tokens = [], []
    for i in range(chunks):
        t0 = time.perf_counter()
        result = dict(zip(names, session.run(None, {**feeds_for(case, ids, i, chunk), **cache})))
        times.append(time.perf_counter() - t0)
        tokens.append(int(result["logits"][0, -1].argmax()))
        cache = {past: result[present] for past, present in case.pairs}
    return times, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-size", choices=["tiny", "bench"], default="bench")
    parser.add_argument("--chunk", type=int, default=16, help="tokens per chunk")
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    case = bg.llama_case(args.llama_size)
    ids = np.random.default_rng(0).integers(0, case.vocab, size=(1, args.chunk * args.chunks),
                                            dtype=np.int64)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(case.ort_model, options, providers=["CPUExecutionProvider"])
    run_light(case, ids, args.chunks, args.chunk, args.threads)  # warm-up
    run_ort(case, session, ids, args.chunks, args.chunk)
    light, onnxrt = [], []
    for _ in range(args.repeats):
        times, tokens = run_light(case, ids, args.chunks, args.chunk, args.threads)
        light.append(times)
        ort_times, ort_tokens = run_ort(case, session, ids, args.chunks, args.chunk)
        onnxrt.append(ort_times)
        if tokens != ort_tokens:
            raise SystemExit(f"onnx-light chose {tokens}, onnxruntime {ort_tokens}")
    light = np.median(np.array(light), axis=0) * 1e3
    onnxrt = np.median(np.array(onnxrt), axis=0) * 1e3
    print(f"{case.name}: chunks of {args.chunk} tokens, median of {args.repeats} repeats, "
          f"threads {args.threads or 'default'}")
    print(f"{'chunk':>6}{'onnx-light ms':>15}{'onnxruntime ms':>16}{'ratio':>8}")
    for i, (a, b) in enumerate(zip(light, onnxrt)):
        note = {0: "  fresh plan", 1: "  packs kept"}.get(i, "")
        print(f"{i + 1:>6}{a:>15.3f}{b:>16.3f}{a / b:>8.2f}{note}")


if __name__ == "__main__":
    main()
