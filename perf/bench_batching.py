"""Continuous batching (issue 15): RequestScheduler's batched mode (one model call per step for
all running requests) against the same requests run one after another through
runtime.generate, in the same process, greedy, on a SmolLM2-135M-shaped decoder (hidden 576,
MLP 1536, 30 layers, 9 query / 3 KV heads of 64, vocab 49152; random seeded FLOAT weights)
whose attention is ai.rt::PagedAttention over row caches (the tiny decoder's builder,
onnx_light.models.tiny_decoder with paged + row_caches).

    PYTHONPATH=python python perf/bench_batching.py [--json OUT.json] [--quick]

Main row: --requests (8) requests of a --prompt (128) token prompt and --new-tokens (128) each,
all submitted at once, vs the same run one after another. Also a curve: 1, 2, 4, 8, 16
requests at once (tokens/s and the ratio to the sequential rate), and the worst gap between
4 decoding requests' tokens while a --long-prompt (1024) token prompt joins them, its prefill
in one call vs in chunks of --chunk (128) tokens (GenerationOptions.prefill_chunk). Checks
every request's tokens against runtime.generate alone (identical_tokens). --quick: 2
layers, 16-token prompts, 8 new tokens, a 64-token long prompt (for the test). The machines are shared: compare within one run.

Both paths are measured warm: one request alone first (plans, packed weights), then the
main row's requests at once (the batched plan, and the page pool's working set: memory the
system hands out afresh is slow to touch, 0.1-0.8 GB/s on this VM, and a step that opens a
page for every row and layer then takes 2-4x its time). That first, cold batched run is
reported too (`cold_concurrent_tokens_per_s`, `cold_decode_gap_ms_p99`).

--export ARCH:SIZE runs the same on a torch.onnx export instead (tests/python/models/export_hf.py,
e.g. llama:smollm2, the SmolLM2-135M shape, random weights) prepared with
`prepare_decoder(..., paged="rows")`: the path for the models users have. --genai
ARCH:SIZE:PRECISION does the same on onnxruntime-genai's builder's build
(tests/python/models/genai_builder.py, e.g. llama:smollm2:int4: the int4 build CPU users run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BUILT = os.path.join(REPO, "python", "onnx_light", "onnx_py")
if os.path.isdir(_BUILT) and any(f.startswith("_onnxpykernels") for f in os.listdir(_BUILT)):
    sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

from onnx_light.models.tiny_decoder import (  # noqa: E402
    TinyDecoderConfig, build_tiny_decoder, empty_cache)
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402


def config(layers: int) -> TinyDecoderConfig:
    return TinyDecoderConfig(vocab_size=49152, hidden_size=576, num_heads=9, num_kv_heads=3,
                             num_layers=layers, mlp_size=1536, max_positions=2048, paged=True,
                             row_caches=True, seed=15)


def prompts(n: int, length: int, vocab: int):
    rng = np.random.default_rng(15)
    return [rng.integers(0, vocab, size=length).tolist() for _ in range(n)]


def percentile(values, q):
    return float(np.percentile(np.asarray(values, np.float64), q)) if values else 0.0


class Bench:
    def __init__(self, cfg, new_tokens):
        self.cfg = cfg
        self.model = build_tiny_decoder(config=cfg)
        self.context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
        self.options = runtime.GenerationOptions(max_new_tokens=new_tokens)

    @property
    def vocab(self) -> int:
        return self.cfg.vocab_size

    def feeds(self, prompt):
        return {"input_ids": np.array([prompt], np.int64), **empty_cache(self.cfg)}

    def sequential(self, ps):
        """runtime.generate one request after another: tokens, seconds, per-token gaps."""
        out, gaps = [], []
        t0 = time.perf_counter()
        for p in ps:
            stamps = []
            tokens = runtime.generate(self.model, self.context, self.feeds(p), self.options,
                                      on_token=lambda step, t: stamps.append(time.perf_counter()))
            out.append(np.from_dlpack(tokens)[0].tolist())
            gaps += [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        return out, time.perf_counter() - t0, gaps

    def join_gap(self, ps, long_prompt, chunk, join_at=2):
        """len(ps) requests decode; at request 0's token `join_at` a long prompt joins (its
        prefill in chunks of `chunk` tokens, 0 = one call). Returns the worst gap (ms)
        between the decoding requests' tokens while it was admitted, and its first-token ms."""
        scheduler = runtime.RequestScheduler(self.context, max_in_flight=len(ps) + 1)
        stamps = [[] for _ in ps]
        joined = {}
        long_options = runtime.GenerationOptions(max_new_tokens=2, prefill_chunk=chunk)

        def first_long_token(step, tokens):
            joined.setdefault("first", time.perf_counter())

        def on_token(i):
            def record(step, tokens):
                stamps[i].append(time.perf_counter())
                if i == 0 and step == join_at:
                    joined["at"] = time.perf_counter()
                    joined["handle"] = scheduler.submit(self.model, self.feeds(long_prompt),
                                                        long_options, on_token=first_long_token)
            return record

        handles = [scheduler.submit(self.model, self.feeds(p), self.options, on_token=on_token(i))
                   for i, p in enumerate(ps)]
        for h in handles:
            h.result()
        joined["handle"].result()
        scheduler.wait_idle()
        start, end = joined["at"], joined["first"]
        gaps = [(b - a) * 1e3 for row in stamps for a, b in zip(row, row[1:])
                if b >= start and a <= end]
        return max(gaps, default=0.0), (end - start) * 1e3

    def concurrent(self, ps):
        """All submitted at once to the scheduler: tokens, seconds, request and scheduler stats."""
        scheduler = runtime.RequestScheduler(self.context, max_in_flight=len(ps))
        t0 = time.perf_counter()
        handles = [scheduler.submit(self.model, self.feeds(p), self.options) for p in ps]
        out = [np.from_dlpack(h.result())[0].tolist() for h in handles]
        elapsed = time.perf_counter() - t0
        scheduler.wait_idle()
        return out, elapsed, [h.stats() for h in handles], scheduler.stats()


class PreparedBench(Bench):
    """The same runs on a decoder file prepared with paged row caches (cached beside it)."""

    def __init__(self, original, vocab, new_tokens):
        from onnx_light import onnx as ol_onnx
        from onnx_light import prepare
        from onnx_light.text import empty_caches

        path = original[: -len(".onnx")] + ".paged_rows.onnx"
        if not os.path.exists(path):
            print(prepare.prepare_decoder(original, path, bind="auto", paged="rows").format(),
                  file=sys.stderr)
        self.cfg = None
        self.model = ol_onnx.load_model(path)
        self.caches = empty_caches(self.model)
        self.layers = len(self.caches)
        self._vocab = vocab
        self.context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
        self.options = runtime.GenerationOptions(max_new_tokens=new_tokens)

    @property
    def vocab(self) -> int:
        return self._vocab

    def feeds(self, prompt):
        return {"input_ids": np.array([prompt], np.int64),
                **{name: [{"blocks": []}] for name in self.caches}}


def prepared_bench(args, new_tokens) -> PreparedBench:
    """--export ARCH:SIZE (a torch export) or --genai ARCH:SIZE:PRECISION (the builder's)."""
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    if args.export:
        from models import export_hf

        arch, size = args.export.split(":")
        return PreparedBench(export_hf.ensure(arch, with_cache=True, size=size, raw=True),
                             export_hf.vocab_size(arch, size), new_tokens)
    from models import genai_builder

    arch, size, precision = args.genai.split(":")
    path = genai_builder.ensure(arch, precision, size)
    with open(os.path.join(os.path.dirname(path), "genai_config.json")) as f:
        vocab = json.load(f)["model"]["vocab_size"]
    return PreparedBench(path, vocab, new_tokens)


def main_row(bench, ps, seq_tokens, prompt):
    tokens, elapsed, stats, sched = bench.concurrent(ps)
    return {
        "concurrent_s": elapsed,
        "concurrent_tokens_per_s": sum(len(t) - prompt for t in tokens) / elapsed,
        "identical_tokens": tokens == seq_tokens,
        "mode": sched["mode"], "max_batch_size": sched["max_batch_size"],
        "batched_calls": sched["batched_calls"],
        "ttft_ms_p50": percentile([s["time_to_first_token_ns"] / 1e6 for s in stats], 50),
        "decode_gap_ms_p99": percentile(
            [g / 1e6 for s in stats for g in s["token_latency_ns"][1:]], 99),
    }


def curve(bench, ps, seq_tokens, prompt, per_token_s, sizes):
    rows = []
    for n in sizes:
        tokens, elapsed, _, stats = bench.concurrent(ps[:n])
        alone = seq_tokens[:n] + [bench.sequential([p])[0][0] for p in ps[len(seq_tokens):n]]
        rate = sum(len(t) - prompt for t in tokens) / elapsed
        rows.append({"concurrent": n, "tokens_per_s": rate,
                     "ratio_to_sequential": rate * per_token_s,
                     "max_batch_size": stats["max_batch_size"],
                     "identical_tokens": tokens == alone})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="2 layers, short prompts (tests)")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=None)
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--curve", default="1,2,4,8,16")
    ap.add_argument("--long-prompt", type=int, default=None,
                    help="tokens of the prompt that joins 4 decoding requests (0: skip)")
    ap.add_argument("--chunk", type=int, default=None, help="its prefill chunk")
    ap.add_argument("--sections", default="main,curve,long")
    ap.add_argument("--export", metavar="ARCH:SIZE",
                    help="a prepared torch export (e.g. llama:smollm2) instead of the tiny "
                         "decoder")
    ap.add_argument("--genai", metavar="ARCH:SIZE:PRECISION",
                    help="onnxruntime-genai's builder's build (e.g. llama:smollm2:int4) "
                         "instead of the tiny decoder")
    args = ap.parse_args(argv)
    layers = args.layers or (2 if args.quick else 30)
    prompt = args.prompt or (16 if args.quick else 128)
    new_tokens = args.new_tokens or (8 if args.quick else 128)
    long_prompt = args.long_prompt if args.long_prompt is not None else (
        64 if args.quick else 1024)
    chunk = args.chunk or (16 if args.quick else 128)
    sections = args.sections.split(",")
    if args.export or args.genai:
        bench = prepared_bench(args, new_tokens)
        layers = bench.layers
    else:
        bench = Bench(config(layers), new_tokens)
    ps = prompts(max([args.requests] + [int(n) for n in args.curve.split(",")]), prompt,
                 bench.vocab)
    bench.sequential(ps[:1])  # compile and warm up the shared session
    cold = main_row(bench, ps[:args.requests], None, prompt) if "main" in sections else None
    result = {"requests": args.requests, "prompt_tokens": prompt, "new_tokens": new_tokens,
              "model": args.export or args.genai or "tiny_decoder (paged rows)",
              "layers": layers, "hidden": 576, "vocab": bench.vocab,
              "identical_tokens": True}
    seq_tokens, seq_s, seq_gaps = bench.sequential(ps[:args.requests])
    generated = sum(len(t) - prompt for t in seq_tokens)
    result["sequential_s"] = seq_s
    result["sequential_tokens_per_s"] = generated / seq_s
    result["alone_decode_gap_ms_p99"] = percentile(seq_gaps, 99)
    if "main" in sections:
        result["cold_concurrent_tokens_per_s"] = cold["concurrent_tokens_per_s"]
        result["cold_decode_gap_ms_p99"] = cold["decode_gap_ms_p99"]
        result.update(main_row(bench, ps[:args.requests], seq_tokens, prompt))
        result["speedup"] = result["concurrent_tokens_per_s"] / result["sequential_tokens_per_s"]
        result["gap_ratio_p99"] = (result["decode_gap_ms_p99"] / result["alone_decode_gap_ms_p99"]
                                   if result["alone_decode_gap_ms_p99"] else 0.0)
    if "curve" in sections:
        result["curve"] = curve(bench, ps, seq_tokens, prompt, seq_s / generated,
                                [int(x) for x in args.curve.split(",")])
        result["identical_tokens"] &= all(row["identical_tokens"] for row in result["curve"])
    if "long" in sections and long_prompt > 0:
        lp = prompts(1, long_prompt, bench.vocab)[0]
        rows = {}
        for c in (0, chunk):
            gap, ttft = bench.join_gap(ps[:4], lp, c)
            rows[f"chunk_{c}"] = {"prefill_chunk": c, "decode_gap_ms_max": gap,
                                  "long_prompt_ttft_ms": ttft}
        result["long_prompt_join"] = {"long_prompt_tokens": long_prompt, "decoding": 4, **rows}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
