"""Real-size decoders: onnx-light against onnxruntime on the same exported file, same run.

Shapes (tests/python/models/export_hf.py, random seeded weights, FLOAT, tied embeddings,
exported with torch.onnx.export (dynamo; --exporter torchscript: dynamo=False, what Optimum
and the Hub's decoders use) with KV caches; exports cached under build/models):
  smollm2  Llama architecture, the shape of SmolLM2-135M (hidden 576, 30 layers, 9/3 heads,
           vocab 49152)
  qwen05   Qwen2 architecture, the shape of Qwen2.5-0.5B (hidden 896, 24 layers, 14/2 heads,
           vocab 151936)
  *_2l     the same widths with 2 layers (quick checks)
  llama32_1b  Llama architecture, the shape of Llama-3.2-1B (hidden 2048, 16 layers, 32/8
           heads, vocab 128256, llama3 rope scaling; 4.9 GB: not in the default run)
  qwen3_06b, gemma3_270m, gemma2_2b_8l  the shapes of Qwen3-0.6B and Gemma-3-270M, and
           Gemma-2-2B's widths with 8 of its layers (transformers' eager attention)

Engines, batch 1, greedy, prompt then one token per step, caches fed back:
  onnx-light   runtime.generate on the bound model (per-token times from on_token)
  onnxruntime  InferenceSession with IOBinding (outputs bound to ORT-allocated values, the
               presents fed back as the next pasts without a NumPy round trip)
  onnxruntime-genai  when installed, for the shapes its model builder takes here (smollm2,
               qwen05): its own Generator on the builder's fp32 conversion of the same
               shape, seeded the same way (tests/python/models/genai_builder.py; Qwen2's
               biases are drawn differently, so its tokens are reported, not required)
  llama-cpp-python  not run: it needs a GGUF conversion (the script says so when installed)
The engines run interleaved, round by round, so a change in the machine's speed hits all.
Every round checks that onnx-light and onnxruntime produce the same tokens.

RSS MB is how much the process's resident memory grew while that engine loaded the model and
ran its warm-up; the last line gives the process's peak.

The machine's read bandwidth is measured in the same run (a 1 GiB float32 reduction, best of
5, with the engines' thread count before and after every engine's run, and once with 1
thread) and each engine's decode step is reported against the bytes-per-token bound: weights
read once (every initializer's bytes, the tied embedding counted once) plus the cache at the
mean decode length. "bound %" uses the best rate of the whole case, "beside %" the best rate
measured just before or after that engine's own runs, "median %" the median of all the rates
measured through the case: this VM's 2-thread rate flips between about 33 and 58 GB/s from one
second to the next (its 1-thread rate stays near 30), so the best of several is the high
level, which a run of many steps meets only part of the time.

    PYTHONPATH=. .venv/bin/python perf/bench_real_decode.py [--shapes smollm2 qwen05]
        [--prompts 128 1024] [--new-tokens 128] [--rounds 3] [--threads 2]
        [--quantize dynamic|q4|fp16|q4f16|bnb4] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))  # the exporter of the HF models

import numpy as np  # noqa: E402

from models import export_hf  # noqa: E402

SHAPES = {"smollm2": "llama", "smollm2_2l": "llama", "qwen05": "qwen2", "qwen05_2l": "qwen2",
          "llama32_1b": "llama", "qwen3_06b": "qwen3", "gemma3_270m": "gemma3_text",
          "gemma2_2b_8l": "gemma2"}


def weight_bytes(path: str) -> int:
    """Bytes of every initializer of an exported file (what a decode step reads once)."""
    import onnx

    proto = onnx.load(path, load_external_data=False)
    total = 0
    for t in proto.graph.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        total += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total


def read_bandwidth(threads: int, repeats: int = 5) -> float:
    """GB/s of a 1 GiB float32 max split over `threads` Python threads (NumPy releases the
    GIL in the reduction), best of `repeats`."""
    data = np.ones(1 << 28, np.float32)
    parts = np.array_split(data, threads)
    best = float("inf")
    for _ in range(repeats):
        workers = [threading.Thread(target=np.max, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t0)
    return data.nbytes / best / 1e9


# The variants the Hub's ONNX repositories ship (tests/python/models/hub_variants.py), and
# the suffix of the file made once beside the export.
VARIANTS = {"dynamic": "qdyn", "q4": "q4", "fp16": "fp16", "q4f16": "q4f16", "bnb4": "bnb4"}


def converted(path: str, kind: str) -> str:
    """The export converted to `kind` (hub_variants.convert), made once beside it."""
    from models import hub_variants

    out = path[: -len(".onnx")] + f".{VARIANTS[kind]}.onnx"
    if not os.path.exists(out):
        hub_variants.convert(path, kind, out, external_data=kind != "dynamic")
    return out


class Shape:
    def __init__(self, name: str, exporter: str = "dynamo", quantize: str = "none"):
        self.name, self.arch = name, SHAPES[name]
        self.quantized = quantize != "none"  # (tokens reported, not required, to agree)
        self.dtype = np.float16 if quantize in ("fp16", "q4f16") else np.float32
        # onnx-light runs `prepared` (None: `path` with bindings added by name), onnxruntime
        # `path`. A TorchScript export goes through the user's `prepare --bind auto`.
        self.prepared = None
        if exporter == "dynamo":
            self.path = export_hf.ensure(self.arch, with_cache=True, size=name)
            if quantize != "none":
                self.path = converted(self.path, quantize)
        else:
            from onnx_light import prepare

            if exporter == "merged":
                from models import merged_decoder

                self.path = merged_decoder.ensure(self.arch, name)
            else:
                self.path = export_hf.ensure(self.arch, with_cache=True, size=name, raw=True,
                                             exporter=exporter)
            if quantize != "none":
                self.path = converted(self.path, quantize)
            self.prepared = self.path[: -len(".onnx")] + ".prepared.onnx"
            if os.path.exists(self.prepared):  # prepared afresh: it is the code under test
                os.remove(self.prepared)
            prepare.prepare_decoder(self.path, self.prepared, bind="auto")
        self.layers, self.kv_heads, self.head_dim = export_hf.cache_shape(self.arch, name)
        self.vocab = export_hf.vocab_size(self.arch, name)
        self.pairs = export_hf.cache_names(self.layers)
        self.weights = weight_bytes(self.path)

    def empty_cache(self):
        return {k: v.astype(self.dtype)
                for k, v in export_hf.empty_cache(self.arch, 1, self.name).items()}

    def cache_bytes(self, length: float) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype().itemsize * length


class OnnxLight:
    name = "onnx-light"

    def __init__(self, shape: Shape, threads: int):
        from onnx_light import onnx as ol_onnx
        from onnx_light.onnx_py._onnxpykernels import runtime

        self.runtime, self.shape, self.threads = runtime, shape, threads
        t0 = time.perf_counter()
        self.model = ol_onnx.load_model(shape.prepared or shape.path)
        if shape.prepared is None:
            export_hf.add_cache_bindings(self.model, shape.layers)
        self.load_s = time.perf_counter() - t0
        self.context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))

    def generate(self, prompt, new_tokens):
        rt = self.runtime
        stamps = []
        options = rt.GenerationOptions(max_new_tokens=new_tokens)
        session_options = rt.RuntimeSessionOptions(intra_op_threads=self.threads)
        start = time.perf_counter()
        tokens = rt.generate(self.model, self.context, {"input_ids": prompt,
                                                        **self.shape.empty_cache()},
                             options, session_options,
                             on_token=lambda step, t: stamps.append(time.perf_counter()))
        steps = np.diff(np.array([start] + stamps))
        return np.from_dlpack(tokens)[0, prompt.shape[1]:].tolist(), steps


class OnnxRuntime:
    name = "onnxruntime"

    def __init__(self, shape: Shape, threads: int):
        import onnxruntime as ort

        self.ort, self.shape = ort, shape
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        t0 = time.perf_counter()
        self.session = ort.InferenceSession(shape.path, options,
                                            providers=["CPUExecutionProvider"])
        self.load_s = time.perf_counter() - t0
        self.outputs = [o.name for o in self.session.get_outputs()]
        # A merged decoder: its no-past branch on the prompt, the with-past one after.
        self.merged = "use_cache_branch" in {i.name for i in self.session.get_inputs()}

    def generate(self, prompt, new_tokens):
        ort, s = self.ort, self.session
        cache = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in self.shape.empty_cache().items()}
        ids, start, out, steps = prompt, 0, [], []
        total = prompt.shape[1]
        for _ in range(new_tokens):
            t0 = time.perf_counter()
            binding = s.io_binding()
            binding.bind_cpu_input("input_ids", ids)
            binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
            binding.bind_cpu_input("position_ids",
                                   np.arange(start, start + ids.shape[1], dtype=np.int64)[None])
            for past, value in cache.items():
                binding.bind_ortvalue_input(past, value)
            if self.merged:
                binding.bind_cpu_input("use_cache_branch", np.array([start > 0]))
            for name in self.outputs:
                binding.bind_output(name, "cpu")
            s.run_with_iobinding(binding)
            values = dict(zip(self.outputs, binding.get_outputs()))
            token = int(values["logits"].numpy()[0, -1].argmax())
            steps.append(time.perf_counter() - t0)
            cache = {past: values[present] for past, present in self.shape.pairs}
            start += ids.shape[1]
            total += 1
            ids = np.array([[token]], np.int64)
            out.append(token)
        return out, np.array(steps)


class OnnxRuntimeGenai:
    """onnxruntime-genai's own greedy loop (its Generator) on its model builder's fp32
    conversion of the same shape (tests/python/models/genai_builder.py: the checkpoint of
    docs/examples/random_checkpoint.py, seeded as export_hf's model, biases drawn at random),
    so its weights are the same as the export's only where the architecture has no biases:
    its tokens are reported, not required to match."""
    name = "onnxruntime-genai"
    matches_tokens = False

    def __init__(self, shape: Shape, threads: int):
        import onnxruntime_genai as og
        from models import genai_builder

        self.og = og
        path = genai_builder.ensure(shape.arch, "fp32", shape.name)
        t0 = time.perf_counter()
        config = og.Config(os.path.dirname(path))
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": threads}}}}))
        self.model = og.Model(config)
        self.load_s = time.perf_counter() - t0

    @staticmethod
    def available(shape: Shape) -> bool:
        try:
            import onnxruntime_genai  # noqa: F401
            from models import genai_builder
        except ImportError:
            return False
        return shape.name in genai_builder.REAL_SIZES.get(shape.arch, ())

    def generate(self, prompt, new_tokens):
        og = self.og
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=prompt.shape[1] + new_tokens, do_sample=False)
        generator = og.Generator(self.model, params)
        tokens, steps = [], []
        t0 = time.perf_counter()
        generator.append_tokens(prompt[0].tolist())  # the prompt step, then one per token
        while not generator.is_done() and len(tokens) < new_tokens:
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
            steps.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
        return tokens, np.array(steps)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """The process's resident memory now (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def bench_shape(shape: Shape, args, report):
    # Each engine's memory: how much the process's resident memory grows while it loads the
    # model and warms up (and stays grown: the engines live on).
    engines, rss = [], {}
    warm = np.arange(8, dtype=np.int64)[None]
    classes = [OnnxLight, OnnxRuntime]
    if OnnxRuntimeGenai.available(shape):
        classes.append(OnnxRuntimeGenai)
    for cls in classes:
        before = rss_mb()
        engine = cls(shape, args.threads)
        engine.generate(warm, 2)  # warm-up: plans, packs, page faults
        rss[engine.name] = rss_mb() - before
        engines.append(engine)
    rng = np.random.default_rng(0)
    for prompt_len in args.prompts:
        prompt = rng.integers(0, shape.vocab, size=(1, prompt_len), dtype=np.int64)
        for e in engines:
            e.generate(prompt[:, :8], 2)
        prefill = {e.name: [] for e in engines}
        decode = {e.name: [] for e in engines}
        totals = {e.name: [] for e in engines}
        # The read rate is measured beside every engine's run (just before and just after
        # it): the rate swings within minutes, so each engine is held to the rates measured
        # around its own runs, and also to the best rate seen in the whole case.
        bandwidth = [read_bandwidth(args.threads)]
        beside = {e.name: [] for e in engines}
        reference, same_tokens = None, {}
        for r in range(args.rounds):
            for e in engines if r % 2 == 0 else engines[::-1]:
                before = bandwidth[-1]
                t0 = time.perf_counter()
                tokens, steps = e.generate(prompt, args.new_tokens)
                totals[e.name].append(time.perf_counter() - t0)
                bandwidth.append(read_bandwidth(args.threads))
                beside[e.name] += [before, bandwidth[-1]]
                if reference is None:
                    reference = tokens
                if not getattr(e, "matches_tokens", True) or shape.quantized:
                    # (Dynamic int8 quantization rounds each activation to one of 256 levels:
                    # a FLOAT difference of an ulp upstream moves a value across a level, and
                    # onnxruntime's own optimized and unoptimized runs of a quantized file
                    # differ by up to 0.09 in the logits here, so near-ties can flip.)
                    same_tokens[e.name] = same_tokens.get(e.name, True) and tokens == reference
                elif tokens != reference:
                    raise SystemExit(f"{shape.name}: {e.name} generated {tokens[:16]}..., "
                                     f"expected {reference[:16]}...")
                prefill[e.name].append(steps[0] * 1e3)
                decode[e.name].extend((steps[1:] * 1e3).tolist())
        one_thread = read_bandwidth(1)
        gbps = max(bandwidth)
        step_bytes = shape.weights + shape.cache_bytes(prompt_len + args.new_tokens / 2)
        bound_ms = step_bytes / (gbps * 1e9) * 1e3
        rows = {}
        for e in engines:
            d = np.array(decode[e.name])
            rows[e.name] = {
                "prefill_ms": float(np.median(prefill[e.name])),
                "decode_ms_p50": float(np.median(d)),
                "decode_ms_p90": float(np.percentile(d, 90)),
                "tokens_per_s": args.new_tokens / float(np.median(totals[e.name])),
                "bound_fraction": bound_ms / float(np.median(d)),
                "read_gbps_beside": max(beside[e.name]),
                "bound_fraction_beside": step_bytes / (max(beside[e.name]) * 1e9) * 1e3
                / float(np.median(d)),
                # Against the median of the rates measured through the case: on a VM whose
                # 2-thread rate flips between two levels (about 33 and 58 GB/s here, the
                # second core's memory path shared or not), the best of several is the high
                # level, which a run of many steps meets only part of the time.
                "bound_fraction_median": step_bytes / (float(np.median(bandwidth)) * 1e9) * 1e3
                / float(np.median(d)),
                "load_s": e.load_s,
                "rss_growth_mb": rss[e.name],
            }
        base = rows["onnxruntime"]
        print(f"\n{shape.name} ({shape.arch}, {shape.weights / 1e6:.0f} MB weights), prompt "
              f"{prompt_len}, {args.new_tokens} new tokens, {args.threads} threads; read rate "
              f"{gbps:.1f} GB/s (best of {len(bandwidth)}, measured beside every run; 1 thread "
              f"{one_thread:.1f} GB/s, median {np.median(bandwidth):.1f}), bound {bound_ms:.2f} "
              "ms/token")
        print(f"{'engine':<18}{'prefill ms':>11}{'decode p50':>11}{'p90':>8}{'tok/s':>8}"
              f"{'bound %':>9}{'beside %':>9}{'median %':>9}{'prefill x':>10}{'decode x':>10}{'RSS MB':>8}")
        for name, r in rows.items():
            print(f"{name:<18}{r['prefill_ms']:>11.1f}{r['decode_ms_p50']:>11.2f}"
                  f"{r['decode_ms_p90']:>8.2f}{r['tokens_per_s']:>8.1f}"
                  f"{100 * r['bound_fraction']:>8.0f}%"
                  f"{100 * r['bound_fraction_beside']:>8.0f}%"
                  f"{100 * r['bound_fraction_median']:>8.0f}%"
                  f"{r['prefill_ms'] / base['prefill_ms']:>9.2f}x"
                  f"{r['decode_ms_p50'] / base['decode_ms_p50']:>9.2f}x"
                  f"{r['rss_growth_mb']:>8.0f}")
        report["results"].append({"shape": shape.name, "prompt": prompt_len,
                                  "read_gbps": gbps, "bandwidth_rounds": bandwidth,
                                  "read_gbps_one_thread": one_thread,
                                  "read_gbps_median": float(np.median(bandwidth)),
                                  "bound_ms": bound_ms,
                                  "identical_tokens": all(same_tokens.values()),
                                  "own_weights_same_tokens": same_tokens, "engines": rows})
        for name, same in same_tokens.items():
            what = ("the quantized export; its tokens" if name == "onnx-light" or
                    (shape.quantized and name == "onnxruntime") else
                    "its own conversion of the weights; its tokens")
            print(f"{name}: {what} {'equal' if same else 'differ from'} "
                  f"{engines[0].name}'s first run")
    del engines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["smollm2", "qwen05"],
                        choices=sorted(SHAPES))
    parser.add_argument("--prompts", nargs="+", type=int, default=[128, 1024])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--exporter", choices=["dynamo", "torchscript", "merged"],
                        default="dynamo",
                        help="torchscript: torch.onnx.export(dynamo=False), as Hugging Face "
                             "Optimum exports and most decoders on the Hub are, prepared with "
                             "prepare_decoder(bind='auto') for onnx-light; merged: two such "
                             "exports (without and with a past) joined by an If on "
                             "use_cache_branch, as Optimum's decoder_model_merged.onnx "
                             "(onnxruntime runs the no-past branch on the prompt)")
    parser.add_argument("--quantize", choices=["none", *VARIANTS], default="none",
                        help="both engines run the export converted by onnxruntime's tools as "
                             "the Hub's ONNX repositories ship it: dynamic (quantize_dynamic: "
                             "int8 weights, DynamicQuantizeLinear and MatMulInteger), q4 "
                             "(MatMulNBitsQuantizer, block 32), fp16 (convert_float_to_float16) "
                             ", q4f16 (both) or bnb4 (MatMulBnb4Quantizer, NF4)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    try:
        __import__("llama_cpp")
        print("note: llama_cpp is installed but needs a GGUF conversion of the weights; not run "
              "here")
    except ImportError:
        pass
    import onnxruntime

    report = {"threads": args.threads, "new_tokens": args.new_tokens,
              "onnxruntime": onnxruntime.__version__, "results": []}
    for name in args.shapes:
        bench_shape(Shape(name, args.exporter, args.quantize), args, report)
    report["peak_rss_mb"] = peak_rss_mb()
    print(f"\npeak RSS of the process (all engines): {report['peak_rss_mb']:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
