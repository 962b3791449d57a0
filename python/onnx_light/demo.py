"""The README's main command: greedy generation on a tiny decoder that onnx-light builds
itself (no download), with per-token timing and a progress display.

    python -m onnx_light.demo [--prompt TEXT] [--tokens N] [--no-compare]

The KV cache stays inside a PersistentValueState between calls (bound past <- present),
so no cache byte crosses into Python. When onnxruntime is installed, the same model runs
there too with the cache fed back by hand, and the tokens and timings are compared.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache

FIRST_CHAR = 32  # token t <-> chr(32 + t): the 96 printable ASCII characters


def encode(text: str) -> list[int]:
    bad = [ch for ch in text if not 32 <= ord(ch) < 128]
    if bad:
        raise ValueError(f"prompt has characters outside printable ASCII: {bad!r}")
    return [ord(ch) - FIRST_CHAR for ch in text]


def decode(tokens) -> str:
    return "".join(chr(FIRST_CHAR + int(t)) for t in tokens)


class Progress:
    """One self-rewriting line on a terminal; a line every 25% otherwise (logs, CI)."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.tty = total, label, sys.stderr.isatty()
        self.last_quarter = -1

    def update(self, done: int, text: str, ms: float) -> None:
        if self.tty:
            width = 24
            filled = int(width * done / self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{done}/{self.total} {ms:6.3f} ms/token  {text[-30:]!r}")
            sys.stderr.flush()
        else:
            quarter = 4 * done // self.total
            if quarter != self.last_quarter:
                self.last_quarter = quarter
                print(f"  {self.label}: {done}/{self.total} tokens", flush=True)

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def generate_onnx_light(model, config, prompt, new_tokens, progress):
    from onnx_light.onnx_py._onnxpykernels import runtime

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    t0 = time.perf_counter_ns()
    state = runtime.PersistentValueState(model, initial=empty_cache(config))
    setup_ns = time.perf_counter_ns() - t0
    tokens, step_ns = list(prompt), []
    token = prompt[0]
    for pos in range(len(prompt) + new_tokens - 1):
        feeds = {"input_ids": np.array([[token]], np.int64),
                 "position_ids": np.array([[pos]], np.int64)}
        t0 = time.perf_counter_ns()
        out = state.run(context, feeds)
        logits = np.from_dlpack(out["logits"])
        nxt = int(logits[0, -1].argmax())
        step_ns.append(time.perf_counter_ns() - t0)
        if pos + 1 < len(prompt):
            token = prompt[pos + 1]  # still reading the prompt
        else:
            token = nxt
            tokens.append(token)
            progress.update(len(tokens) - len(prompt), decode(tokens), step_ns[-1] / 1e6)
    state.close()
    return tokens, setup_ns, step_ns


def generate_onnxruntime(model, config, prompt, new_tokens):
    import onnxruntime as ort

    # onnxruntime does not know onnx-light's bindings: strip them and feed back by hand.
    stripped = type(model)()
    stripped.CopyFrom(model)
    names = [(b.input_name, b.output_name) for b in stripped.graph.persistent_bindings]
    del stripped.graph.persistent_bindings[:]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    t0 = time.perf_counter_ns()
    session = ort.InferenceSession(stripped.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    setup_ns = time.perf_counter_ns() - t0
    output_names = [o.name for o in session.get_outputs()]
    cache = empty_cache(config)
    tokens, step_ns, token = list(prompt), [], prompt[0]
    for pos in range(len(prompt) + new_tokens - 1):
        feeds = {"input_ids": np.array([[token]], np.int64),
                 "position_ids": np.array([[pos]], np.int64), **cache}
        t0 = time.perf_counter_ns()
        out = dict(zip(output_names, session.run(None, feeds)))
        nxt = int(out["logits"][0, -1].argmax())
        cache = {inp: out[outp] for inp, outp in names}
        step_ns.append(time.perf_counter_ns() - t0)
        if pos + 1 < len(prompt):
            token = prompt[pos + 1]
        else:
            token = nxt
            tokens.append(token)
    return tokens, setup_ns, step_ns


def summary(label: str, setup_ns: int, step_ns: list[int], generated: int) -> float:
    steps = np.array(step_ns) / 1e3
    decode_steps = steps[-generated:]
    per_token = float(np.median(decode_steps))
    print(f"{label:>12}: setup {setup_ns / 1e6:7.2f} ms | per token median {per_token:8.1f} us "
          f"p90 {np.percentile(decode_steps, 90):8.1f} us | {1e6 / per_token:8.0f} tokens/s")
    return per_token


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="onnx-light ")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--no-compare", action="store_true", help="skip onnxruntime")
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")

    config = TinyDecoderConfig()
    prompt = encode(args.prompt)
    print(f"onnx-light demo: tiny decoder ({config.num_layers} layers, hidden "
          f"{config.hidden_size}, {config.num_heads} heads, vocab {config.vocab_size}), "
          f"KV cache retained by PersistentValueState")
    print(f"prompt: {args.prompt!r} ({len(prompt)} tokens, fed one per call), "
          f"generating {args.tokens} tokens greedily")
    model = build_tiny_decoder(config=config)
    progress = Progress(args.tokens, "onnx-light")
    tokens, setup_ns, step_ns = generate_onnx_light(model, config, prompt, args.tokens, progress)
    progress.close()
    print(f"output: {decode(tokens)!r}")
    ours = summary("onnx-light", setup_ns, step_ns, args.tokens)

    if not args.no_compare:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            print("(onnxruntime not installed: `bash dev.sh test` installs it for the comparison)")
            return 0
        ort_tokens, ort_setup, ort_steps = generate_onnxruntime(model, config, prompt, args.tokens)
        theirs = summary("onnxruntime", ort_setup, ort_steps, args.tokens)
        same = ort_tokens == tokens
        print(f"same tokens as onnxruntime: {same}; onnx-light per-token time is "
              f"{ours / theirs:.2f}x onnxruntime's (same process, same model, 1 thread each side)")
        if not same:
            print(f"onnxruntime output: {decode(ort_tokens)!r}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
