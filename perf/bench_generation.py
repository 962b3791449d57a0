"""Greedy generation speed: onnx-light against onnxruntime on the same models, same process.

Models: the built-in demo decoder (onnx_light.models.tiny_decoder, opset-23 Attention with
bound caches) and the Llama-architecture decoder exported by torch.onnx.export with a KV
cache (tests/python/models/export_hf.py; `--llama-size bench` for hidden 256, 4 layers).
Runners, each from empty caches, batch 1, prompt once then one token per step:
  onnx-light generate  runtime.generate (the native token loop; per-token times from on_token)
  onnx-light state.run PersistentValueState.run called per step from Python, argmax in NumPy
  onnxruntime          InferenceSession.run per step, present.* fed back as past.*
All runners must produce the same tokens (checked). Per-token latency counts decode steps
only (the prompt step is reported apart); tokens/s counts every new token over the whole
generation including the prompt step. onnx-light's prompt step includes building the
state's plan (each generate call owns fresh state); onnxruntime's session is built once.

    .venv/bin/python perf/bench_generation.py [--llama-size bench]
        [--prompt 16] [--new-tokens 64] [--repeats 3] [--threads 0] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# From a source checkout, use this checkout's build (python/onnx_light, where CMake puts the
# extension) before any installed copy; otherwise the installed package.
_BUILT = os.path.join(REPO, "python", "onnx_light", "onnx_py")
if os.path.isdir(_BUILT) and any(f.startswith("_onnxpykernels") for f in os.listdir(_BUILT)):
    sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))  # the exporter of the HF models

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from models import export_hf  # noqa: E402
from onnx_light import onnx as ol_onnx  # noqa: E402
from onnx_light.models.tiny_decoder import (TinyDecoderConfig, build_tiny_decoder,  # noqa: E402
                                            empty_cache)
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402


class Case:
    """A model in the three forms the runners need, and how to drive it."""

    def __init__(self, name, bound_model, ort_path_or_bytes, caches, pairs, opset, vocab,
                 has_mask):
        self.name, self.bound_model, self.ort_model = name, bound_model, ort_path_or_bytes
        self.caches, self.pairs, self.opset, self.vocab = caches, pairs, opset, vocab
        self.has_mask = has_mask


def demo_case() -> Case:
    config = TinyDecoderConfig()
    pairs = [(f"past_{k}_{i}", f"present_{k}_{i}")
             for i in range(config.num_layers) for k in ("key", "value")]
    return Case("demo (tiny_decoder)", build_tiny_decoder(config=config),
                build_tiny_decoder(onnx, config).SerializeToString(),
                lambda: empty_cache(config), pairs, 23, config.vocab_size, has_mask=False)


def llama_case(size: str) -> Case:
    path = export_hf.ensure("llama", with_cache=True, size=size)
    layers, kv_heads, head_dim = export_hf.cache_shape("llama", size)
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, layers)
    c = export_hf.CONFIGS[("llama", size)]
    name = (f"llama {size} (hidden {c['hidden_size']}, {layers} layers, "
            f"{c['num_attention_heads']}/{kv_heads} heads, vocab {c['vocab_size']})")
    return Case(name, model, path, lambda: export_hf.empty_cache("llama", 1, size),
                export_hf.cache_names(layers), 18, c["vocab_size"], has_mask=True)


def step_feeds(case: Case, ids, mask, start):
    feeds = {"input_ids": ids,
             "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64)[None]}
    if case.has_mask:
        feeds["attention_mask"] = mask
    return feeds


def run_generate(case: Case, prompt, new_tokens, threads):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(case.opset)))
    stamps = []
    options = runtime.GenerationOptions(max_new_tokens=new_tokens)
    session_options = runtime.RuntimeSessionOptions(intra_op_threads=threads)
    start = time.perf_counter()
    tokens = runtime.generate(case.bound_model, context, {"input_ids": prompt, **case.caches()},
                              options, session_options,
                              on_token=lambda step, t: stamps.append(time.perf_counter()))
    total = time.perf_counter() - start
    steps = np.diff(np.array([start] + stamps))
    return np.from_dlpack(tokens)[0, prompt.shape[1]:].tolist(), total, steps


def run_state(case: Case, prompt, new_tokens, threads):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(case.opset)))
    state = runtime.PersistentValueState(
        case.bound_model, initial=case.caches(),
        options=runtime.RuntimeSessionOptions(intra_op_threads=threads))
    ids, start, out, steps = prompt, 0, [], []
    mask = np.ones((1, prompt.shape[1]), np.int64)
    begin = time.perf_counter()
    for _ in range(new_tokens):
        t0 = time.perf_counter()
        logits = np.from_dlpack(state.run(context, step_feeds(case, ids, mask, start))["logits"])
        token = int(logits[0, -1].argmax())
        steps.append(time.perf_counter() - t0)
        start += ids.shape[1]
        ids = np.array([[token]], np.int64)
        mask = np.ones((1, mask.shape[1] + 1), np.int64)
        out.append(token)
    return out, time.perf_counter() - begin, np.array(steps)


def run_onnxruntime(case: Case, prompt, new_tokens, threads, session):
    names = [o.name for o in session.get_outputs()]
    cache = case.caches()
    ids, start, out, steps = prompt, 0, [], []
    mask = np.ones((1, prompt.shape[1]), np.int64)
    begin = time.perf_counter()
    for _ in range(new_tokens):
        t0 = time.perf_counter()
        result = dict(zip(names, session.run(None, {**step_feeds(case, ids, mask, start),
                                                    **cache})))
        token = int(result["logits"][0, -1].argmax())
        steps.append(time.perf_counter() - t0)
        cache = {past: result[present] for past, present in case.pairs}
        start += ids.shape[1]
        ids = np.array([[token]], np.int64)
        mask = np.ones((1, mask.shape[1] + 1), np.int64)
        out.append(token)
    return out, time.perf_counter() - begin, np.array(steps)


def bench(case: Case, args):
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, case.vocab, size=(1, args.prompt), dtype=np.int64)
    sess_options = ort.SessionOptions()
    sess_options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(case.ort_model, sess_options,
                                   providers=["CPUExecutionProvider"])
    runners = {
        "onnx-light generate": lambda: run_generate(case, prompt, args.new_tokens, args.threads),
        "onnx-light state.run": lambda: run_state(case, prompt, args.new_tokens, args.threads),
        "onnxruntime": lambda: run_onnxruntime(case, prompt, args.new_tokens, args.threads,
                                               session),
    }
    results, reference = {}, None
    for name, runner in runners.items():
        runner()  # warm-up: plans, arenas, page faults
        totals, decode, prompt_steps = [], [], []
        for _ in range(args.repeats):
            tokens, total, steps = runner()
            if reference is None:
                reference = tokens
            if tokens != reference:
                raise SystemExit(f"{case.name}: {name} generated {tokens}, expected {reference}")
            totals.append(total)
            prompt_steps.append(steps[0])
            decode.extend(steps[1:])
        decode = np.array(decode) * 1e3
        results[name] = {
            "tokens_per_s": args.new_tokens / float(np.median(totals)),
            "prompt_ms": float(np.median(prompt_steps)) * 1e3,
            "token_ms_median": float(np.median(decode)),
            "token_ms_p90": float(np.percentile(decode, 90)),
        }
    return results


def print_table(case_name, results):
    base = results["onnxruntime"]
    print(f"\n{case_name}")
    print(f"{'runner':<22}{'tokens/s':>10}{'prompt ms':>11}{'token ms p50':>14}"
          f"{'token ms p90':>14}{'tok/s vs ort':>14}{'p50 vs ort':>12}")
    for name, r in results.items():
        print(f"{name:<22}{r['tokens_per_s']:>10.1f}{r['prompt_ms']:>11.3f}"
              f"{r['token_ms_median']:>14.3f}{r['token_ms_p90']:>14.3f}"
              f"{r['tokens_per_s'] / base['tokens_per_s']:>13.2f}x"
              f"{r['token_ms_median'] / base['token_ms_median']:>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-size", choices=["tiny", "bench"], default="tiny",
                        help="tiny: hidden 64, 2 layers (fast); bench: hidden 256, 4 layers")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads of both runtimes (0: their default, all cores)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    report = {"prompt": args.prompt, "new_tokens": args.new_tokens, "repeats": args.repeats,
              "threads": args.threads, "onnxruntime": ort.__version__, "models": {}}
    print(f"greedy generation, batch 1, prompt {args.prompt}, {args.new_tokens} new tokens, "
          f"{args.repeats} repeats (after a warm-up), threads {args.threads or 'default'}; "
          "all runners produce the same tokens")
    for case in (demo_case(), llama_case(args.llama_size)):
        results = bench(case, args)
        print_table(case.name, results)
        report["models"][case.name] = results
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
