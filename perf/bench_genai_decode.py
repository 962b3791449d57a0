"""Decode speed of onnxruntime-genai builder models (tests/python/models/genai_builder.py:
random-weight checkpoints of the SmolLM2-135M and Qwen2.5-0.5B shapes built by
`python -m onnxruntime_genai.models.builder -e cpu -p int4|fp32`), onnx-light against
onnxruntime on the same file in the same run, rounds interleaved, and onnxruntime-genai's own
generator on the build's folder where the package is installed.

    PYTHONPATH=python python perf/bench_genai_decode.py [--shapes smollm2 qwen05]
        [--precision int4] [--prompt 128] [--new-tokens 32] [--rounds 2] [--threads 2]

onnx-light runs a PersistentValueState with the builder's caches bound by name
(past_key_values.N.* -> present.N.*: each is used once, by its GroupQueryAttention, so
appends are in place); onnxruntime runs with IOBinding, presents fed back as OrtValues. Both
decode the same greedy tokens of their own (random weights: int8 rounding may make them
diverge, which is reported). Prints prefill ms (best round: onnx-light repacks its weights on
the first call of a session, onnxruntime when it loads) and decode ms/token (median of the
best round)."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from models import genai_builder  # noqa: E402

from onnx_light import onnx as ol_onnx  # noqa: E402
from onnx_light.onnx_py._onnxpykernels import runtime  # noqa: E402

ARCH = {"smollm2": "llama", "qwen05": "qwen2"}


def cache_spec(path):
    import json

    with open(os.path.join(os.path.dirname(path), "genai_config.json")) as f:
        head = json.load(f)["model"]["decoder"]["head_size"]
    model = onnx.load(path, load_external_data=False)
    pasts = [i for i in model.graph.input if i.name.startswith("past_key_values.")]
    return [(p.name, p.name.replace("past_key_values.", "present."),
             p.type.tensor_type.shape.dim[1].dim_value, head) for p in pasts]


def empty(spec):
    return {past: np.zeros((1, heads, 0, head), np.float32) for past, _, heads, head in spec}


def onnx_light_session(path, spec, threads):
    model = ol_onnx.load_model(path)
    for past, present, _, _ in spec:
        binding = model.graph.persistent_bindings.add()
        binding.input_name, binding.output_name = past, present
    return runtime.RuntimeSession(model, runtime.RuntimeSessionOptions(intra_op_threads=threads))


def onnx_light_decode(session, spec, prompt, new_tokens):
    state = runtime.PersistentValueState(session, empty(spec))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    ids, total, tokens, steps = prompt, 0, [], []
    for _ in range(new_tokens + 1):
        total += ids.shape[1]
        t0 = time.perf_counter()
        out = state.run(context, {"input_ids": ids,
                                  "attention_mask": np.ones((1, total), np.int64)},
                        output_names=["logits"])
        token = int(np.from_dlpack(out["logits"])[0, -1].argmax())
        steps.append(time.perf_counter() - t0)
        del out
        tokens.append(token)
        ids = np.array([[token]], np.int64)
    return tokens, steps


def onnxruntime_decode(session, spec, prompt, new_tokens):
    outputs = [o.name for o in session.get_outputs()]
    cache = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in empty(spec).items()}
    ids, total, tokens, steps = prompt, 0, [], []
    for _ in range(new_tokens + 1):
        total += ids.shape[1]
        t0 = time.perf_counter()
        binding = session.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        for past, value in cache.items():
            binding.bind_ortvalue_input(past, value)
        for name in outputs:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        values = dict(zip(outputs, binding.get_outputs()))
        token = int(values["logits"].numpy()[0, -1].argmax())
        steps.append(time.perf_counter() - t0)
        cache = {past: values[present] for past, present, _, _ in spec}
        tokens.append(token)
        ids = np.array([[token]], np.int64)
    return tokens, steps


def genai_decode(model, prompt, new_tokens):
    """onnxruntime-genai's own greedy loop on the build's folder (its Generator): the times of
    the prompt step and of each next token, as the other two report them."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=prompt.shape[1] + new_tokens + 1, do_sample=False)
    generator = og.Generator(model, params)
    tokens, steps = [], []
    t0 = time.perf_counter()
    generator.append_tokens(prompt[0].tolist())
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        steps.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
    return tokens, steps


def genai_model(path):
    """onnxruntime-genai's model for the build, or None when the package is not installed."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        return None
    return og.Model(os.path.dirname(path))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=["smollm2", "qwen05"])
    parser.add_argument("--precision", default="int4")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for shape in args.shapes:
        path = genai_builder.ensure(ARCH[shape], args.precision, shape)
        spec = cache_spec(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        ol_session = onnx_light_session(path, spec, args.threads)
        prompt = np.random.default_rng(0).integers(3, 120, (1, args.prompt), dtype=np.int64)
        generator_model = genai_model(path)
        best = {"onnx-light": [], "onnxruntime": []}
        if generator_model is not None:
            best["onnxruntime-genai"] = []
        same = same_genai = 0
        for _ in range(args.rounds):
            ours = onnx_light_decode(ol_session, spec, prompt, args.new_tokens)
            theirs = onnxruntime_decode(session, spec, prompt, args.new_tokens)
            best["onnx-light"].append(ours[1])
            best["onnxruntime"].append(theirs[1])
            same = sum(a == b for a, b in zip(ours[0], theirs[0]))
            if generator_model is not None:
                genai = genai_decode(generator_model, prompt, args.new_tokens)
                best["onnxruntime-genai"].append(genai[1])
                same_genai = sum(a == b for a, b in zip(ours[0], genai[0]))
        print(f"{shape} {args.precision}, prompt {args.prompt}, {args.new_tokens} new tokens, "
              f"{args.threads} threads; same greedy tokens {same}/{args.new_tokens + 1}"
              + (f" (onnxruntime-genai {same_genai}/{args.new_tokens + 1})"
                 if generator_model is not None else ""))
        decode = {}
        for engine, rounds in best.items():
            prefill = min(r[0] for r in rounds) * 1e3
            decode[engine] = min(float(np.median(r[1:])) for r in rounds) * 1e3
            print(f"  {engine:<17} prefill {prefill:8.1f} ms   decode {decode[engine]:6.2f} ms/token")
        for engine in decode:
            if engine != "onnx-light":
                print(f"  decode ratio onnx-light / {engine}: "
                      f"{decode['onnx-light'] / decode[engine]:.2f}")


if __name__ == "__main__":
    main()
