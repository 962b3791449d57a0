"""The README's main command: greedy generation on a tiny decoder that onnx-light builds
itself (no download), with per-token timing and a progress display.

    python -m onnx_light.demo [--prompt TEXT] [--tokens N] [--no-compare]

The model (onnx_light.models.tiny_decoder) declares past_key_i <- present_key_i and
past_value_i <- present_value_i bindings, so runtime.generate keeps the KV caches inside a
PersistentValueState: the prompt is evaluated once, then one token per call, and no cache
byte crosses into Python. When onnxruntime is installed, it runs the same model with the
caches fed back by hand, and tokens and timings are compared in the same process.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache

FIRST_CHAR = 32  # token t <-> chr(32 + t): the 95 printable ASCII characters


def encode(text: str) -> list[int]:
    bad = sorted({ch for ch in text if not 32 <= ord(ch) < 127})
    if bad:
        raise SystemExit(f"error: the prompt has characters outside printable ASCII: {bad!r}")
    if not text:
        raise SystemExit("error: the prompt is empty")
    return [ord(ch) - FIRST_CHAR for ch in text]


def decode(tokens) -> str:
    return "".join(chr(FIRST_CHAR + int(t)) for t in tokens)


class CharTokenizer:
    """The demo's character tokenizer with the interface of a `tokenizers.Tokenizer` that
    onnx_light.text uses (encode(...).ids, decode), for the server's --demo."""

    def encode(self, text: str, add_special_tokens: bool = True):
        import types

        bad = sorted({ch for ch in text if not 32 <= ord(ch) < 127})
        if bad:
            raise ValueError(f"the demo tokenizer knows only printable ASCII, not {bad!r}")
        return types.SimpleNamespace(ids=[ord(ch) - FIRST_CHAR for ch in text])

    def decode(self, ids) -> str:
        return decode(ids)


def text_generator(threads: int | None = None):
    """onnx_light.text.TextGenerator on the demo decoder and CharTokenizer. Its chat format
    is plain Python ("role: content " per message, then "assistant: "; the tokenizer has no
    newline), so --demo needs no jinja2;
    no EOS (every printable character is a token), context of max_positions tokens."""
    from onnx_light.text import ModelSettings, TextGenerator

    class DemoGenerator(TextGenerator):
        def apply_chat_template(self, messages: list) -> str:
            lines = [f"{m['role']}: {m['content']} " for m in messages]
            return "".join(lines) + "assistant: "

    config = TinyDecoderConfig()
    settings = ModelSettings(context_length=config.max_positions)
    return DemoGenerator.from_objects(build_tiny_decoder(config=config), CharTokenizer(),
                                      settings, threads)


class Progress:
    """A self-rewriting bar on a terminal; a line at each quarter otherwise (logs, CI)."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.tty = total, label, sys.stderr.isatty()
        self.last_quarter = -1

    def update(self, done: int, text: str, us: float) -> None:
        if self.tty:
            width = 24
            filled = width * done // self.total
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{done}/{self.total} {us:8.1f} us/token  {text[-24:]!r}   ")
            sys.stderr.flush()
        else:
            quarter = 4 * done // self.total
            if quarter != self.last_quarter:
                self.last_quarter = quarter
                print(f"  {self.label}: {done}/{self.total} tokens", flush=True)

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def run_onnx_light(model, config, prompt, new_tokens, progress):
    from onnx_light.onnx_py._onnxpykernels import runtime

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    options = runtime.GenerationOptions(max_new_tokens=new_tokens)
    feeds = {"input_ids": np.array([prompt], np.int64), **empty_cache(config)}
    stamps, text = [time.perf_counter_ns()], list(prompt)

    def on_token(step, tokens):
        stamps.append(time.perf_counter_ns())
        text.append(tokens[0])
        progress.update(step + 1, decode(text), (stamps[-1] - stamps[-2]) / 1e3)

    result = runtime.generate(model, context, feeds, options, on_token=on_token)
    tokens = np.from_dlpack(result)[0].tolist()
    return tokens, np.diff(stamps)


def run_onnxruntime(model, config, prompt, new_tokens):
    import onnxruntime as ort

    # onnxruntime does not know onnx-light's bindings: remove them explicitly (a standard
    # export refuses to drop them silently) and feed the caches back by hand.
    from onnx_light.onnx_py._onnxpykernels import runtime

    pairs = [(b.input_name, b.output_name) for b in model.graph.persistent_bindings]
    builder = runtime.GraphBuilder(model)
    for input_name, _ in pairs:
        builder.remove_persistent_binding(input_name)
    options = ort.SessionOptions()
    standard = builder.export_standard_onnx()
    # Its first token counts the session's creation, as onnx-light's counts the compilation
    # runtime.generate does on its first call: each from the model in memory.
    stamps = [time.perf_counter_ns()]
    session = ort.InferenceSession(standard, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cache, tokens = empty_cache(config), list(prompt)
    ids, start = np.array([prompt], np.int64), 0
    for _ in range(new_tokens):
        positions = np.arange(start, start + ids.shape[1], dtype=np.int64)[None]
        out = dict(zip(names, session.run(None, {"input_ids": ids, "position_ids": positions, **cache})))
        token = int(out["logits"][0, -1].argmax())
        cache = {inp: out[outp] for inp, outp in pairs}
        stamps.append(time.perf_counter_ns())
        tokens.append(token)
        start += ids.shape[1]
        ids = np.array([[token]], np.int64)
    return tokens, np.diff(stamps)


def summary(label: str, step_ns) -> float:
    decode_us = np.asarray(step_ns[1:]) / 1e3
    per_token = float(np.median(decode_us))
    print(f"{label:>12}: first token (compile included) {step_ns[0] / 1e3:8.1f} us | "
          f"per token median {per_token:7.1f} us, p90 {np.percentile(decode_us, 90):7.1f} us | "
          f"{1e6 / per_token:7.0f} tokens/s")
    return per_token


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="onnx-light generates ")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--no-compare", action="store_true", help="skip onnxruntime")
    args = parser.parse_args(argv)
    if args.tokens < 2:
        parser.error("--tokens must be at least 2")

    config = TinyDecoderConfig()
    prompt = encode(args.prompt)
    print(f"onnx-light demo: tiny decoder built in-process ({config.num_layers} layers, hidden "
          f"{config.hidden_size}, {config.num_heads} heads, vocabulary {config.vocab_size} "
          f"printable characters), KV caches kept in a PersistentValueState")
    print(f"prompt {args.prompt!r}: {len(prompt)} tokens in one call, then {args.tokens} "
          f"tokens greedily, one call each")
    model = build_tiny_decoder(config=config)
    progress = Progress(args.tokens, "onnx-light")
    tokens, ours_ns = run_onnx_light(model, config, prompt, args.tokens, progress)
    progress.close()
    print(f"output: {decode(tokens)!r}")
    ours = summary("onnx-light", ours_ns)
    if args.no_compare:
        return 0
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("(onnxruntime is not installed here; `bash dev.sh test` installs it)")
        return 0
    ort_tokens, ort_ns = run_onnxruntime(model, config, prompt, args.tokens)
    theirs = summary("onnxruntime", ort_ns)
    same = ort_tokens == tokens
    print(f"same tokens as onnxruntime: {same}. onnx-light's per-token time is "
          f"{ours / theirs:.2f}x onnxruntime's (measured side by side in this process)")
    if not same:
        print(f"onnxruntime output: {decode(ort_tokens)!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
