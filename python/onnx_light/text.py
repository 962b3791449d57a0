"""Text in, text out: a Hugging Face `tokenizers` tokenizer around runtime.generate.

    from onnx_light.text import TextGenerator
    gen = TextGenerator("model.onnx", "tokenizer_dir_or_tokenizer.json")
    for piece in gen.stream("Once upon a time", max_new_tokens=32):
        print(piece, end="", flush=True)
    print(gen.last_stats)   # prompt tokens, prefill ms, decode tokens/s

and from the shell (the same thing, streaming to stdout, figures to stderr):

    python -m onnx_light generate model.onnx --tokenizer DIR --prompt "Once upon a time"

The model must carry persistent_bindings for its caches (``python -m onnx_light prepare``
writes them); generation never guesses bindings. The caches start empty: each bound input
gets zeros of its declared shape with a symbolic first dimension (the batch) 1 and the other
symbolic dimensions (the past length) 0. EOS and BOS come from ``genai_config.json``,
``generation_config.json`` or ``config.json`` beside the model or the tokenizer (first found),
the chat template from ``tokenizer_config.json`` (``chat=True``; needs jinja2).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.streaming import generate_stream

_ELEMENT_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64}


@dataclass
class TextStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_ms: float = 0.0       # from the call to the first token
    decode_tokens_per_s: float = 0.0  # over the tokens after the first
    stopped_by: str = ""           # "eos", "stop string", "max_new_tokens"


@dataclass
class ModelSettings:
    """What the JSON files beside a model say about generation."""
    eos_token_ids: list = field(default_factory=list)
    bos_token_id: int | None = None
    chat_template: str | None = None


def load_tokenizer(path: str):
    """A `tokenizers.Tokenizer` from tokenizer.json or a directory holding one."""
    from tokenizers import Tokenizer

    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer.json at '{path}'")
    return Tokenizer.from_file(file)


def _ids(value) -> list:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def read_settings(*dirs: str) -> ModelSettings:
    """EOS/BOS from the first of genai_config.json, generation_config.json, config.json found
    in `dirs` (in order); the chat template from the first tokenizer_config.json."""
    settings = ModelSettings()
    found = False
    for d in dirs:
        for name in ("genai_config.json", "generation_config.json", "config.json"):
            path = os.path.join(d, name)
            if found or not os.path.isfile(path):
                continue
            with open(path) as f:
                data = json.load(f)
            source = data.get("model", data) if name == "genai_config.json" else data
            settings.eos_token_ids = _ids(source.get("eos_token_id"))
            bos = _ids(source.get("bos_token_id"))
            settings.bos_token_id = bos[0] if bos else None
            found = True
        path = os.path.join(d, "tokenizer_config.json")
        if settings.chat_template is None and os.path.isfile(path):
            with open(path) as f:
                settings.chat_template = json.load(f).get("chat_template")
    return settings


def empty_caches(model) -> dict:
    """Zeros for every bound input: a symbolic first dimension (batch) 1, the others 0."""
    declared = {v.name: v for v in model.graph.input}
    caches = {}
    for binding in model.graph.persistent_bindings:
        value = declared.get(binding.input_name)
        if value is None or not value.type.HasField("tensor_type"):
            raise ValueError(f"bound input '{binding.input_name}' has no declared tensor type")
        tensor = value.type.tensor_type
        dtype = _ELEMENT_TYPES.get(tensor.elem_type)
        if dtype is None:
            raise ValueError(f"bound input '{binding.input_name}' has element type "
                             f"{tensor.elem_type}, which empty caches do not support")
        shape = [d.dim_value if d.HasField("dim_value") else (1 if i == 0 else 0)
                 for i, d in enumerate(tensor.shape.dim)]
        caches[binding.input_name] = np.zeros(shape, dtype)
    return caches


def _held_back(full: str, stop: tuple) -> int:
    """How much of `full` may be shown: not a trailing partial character (U+FFFD from a
    multi-byte character cut between tokens), nor a tail that could start a stop string."""
    safe = len(full)
    while safe > 0 and full[safe - 1] == "\ufffd":
        safe -= 1
    for s in stop:
        for k in range(min(len(s) - 1, safe), 0, -1):
            if full[:safe].endswith(s[:k]):
                safe -= k
                break
    return safe


class TextGenerator:
    """One model and tokenizer; stream() runs one generation and yields decoded text."""

    def __init__(self, model_path: str, tokenizer_path: str, threads: int | None = None):
        self.model = ol_onnx.load_model(model_path)
        if len(self.model.graph.persistent_bindings) == 0 and any(
                i.name.startswith("past") for i in self.model.graph.input):
            raise ValueError(f"'{model_path}' has cache inputs but no persistent_bindings: "
                             "run `python -m onnx_light prepare` on it first")
        self.tokenizer = load_tokenizer(tokenizer_path)
        tokenizer_dir = tokenizer_path if os.path.isdir(tokenizer_path) else \
            os.path.dirname(os.path.abspath(tokenizer_path))
        self.settings = read_settings(os.path.dirname(os.path.abspath(model_path)),
                                      tokenizer_dir)
        opset = max([o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")]
                    or [18])
        self.context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(opset)))
        self.session_options = runtime.RuntimeSessionOptions()
        if threads:
            self.session_options.intra_op_threads = threads
        self.last_stats = TextStats()

    def prompt_ids(self, prompt: str, chat: bool = False) -> list:
        if chat:
            prompt = self._apply_chat_template(prompt)
        ids = self.tokenizer.encode(prompt, add_special_tokens=not chat).ids
        bos = self.settings.bos_token_id
        if bos is not None and not chat and (not ids or ids[0] != bos):
            ids = [bos] + ids
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        return ids

    def _apply_chat_template(self, prompt: str) -> str:
        if not self.settings.chat_template:
            raise ValueError("chat=True but no tokenizer_config.json with a chat_template was "
                             "found beside the model or the tokenizer")
        try:
            import jinja2
        except ImportError as exc:  # pragma: no cover - jinja2 ships with transformers
            raise ImportError("chat templates need jinja2: pip install jinja2") from exc
        template = jinja2.Environment().from_string(self.settings.chat_template)
        return template.render(messages=[{"role": "user", "content": prompt}],
                               add_generation_prompt=True)

    def stream(self, prompt: str, max_new_tokens: int = 64, temperature: float = 0.0,
               top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               stop: tuple = (), chat: bool = False):
        """Yields the text of each new token as it is published (the suffix the new token adds
        to the decoded text, so multi-token characters come out whole). Stops at EOS, at a
        stop string (not yielded) or after max_new_tokens; sets self.last_stats."""
        ids = self.prompt_ids(prompt, chat)
        options = runtime.GenerationOptions(max_new_tokens=max_new_tokens,
                                            temperature=temperature, top_k=top_k, top_p=top_p,
                                            seed=seed)
        eos = self.settings.eos_token_ids
        if eos:
            options.eos_token_id = eos[0]
            options.stop_token_ids = eos[1:]
        feeds = {"input_ids": np.asarray([ids], np.int64), **empty_caches(self.model)}
        stats = TextStats(prompt_tokens=len(ids), stopped_by="max_new_tokens")
        new, text, start, first = [], "", time.perf_counter(), None
        full = ""
        for tokens in generate_stream(self.model, self.context, feeds, options,
                                      self.session_options):
            token = int(tokens[0])
            now = time.perf_counter()
            if first is None:
                first = now
                stats.prefill_ms = (now - start) * 1e3
            if token in eos:
                stats.stopped_by = "eos"
                break
            new.append(token)
            full = self.tokenizer.decode(new)
            hits = [i for i in (full.find(s) for s in stop) if i >= 0]
            if hits:
                full = full[:min(hits)]
                stats.stopped_by = "stop string"
                break
            safe = _held_back(full, stop)
            if safe > len(text):
                yield full[len(text):safe]
                text = full[:safe]
        if len(full) > len(text):
            yield full[len(text):]
        stats.new_tokens = len(new)
        if first is not None and len(new) > 1:
            stats.decode_tokens_per_s = (len(new) - 1) / max(time.perf_counter() - first, 1e-9)
        self.last_stats = stats


def add_arguments(parser) -> None:
    """The `python -m onnx_light generate` arguments."""
    parser.add_argument("model", help="an ONNX decoder with persistent_bindings (see prepare)")
    parser.add_argument("--tokenizer", required=True,
                        help="tokenizer.json, or a directory holding it")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[],
                        help="stop when this text appears (repeatable)")
    parser.add_argument("--chat", action="store_true",
                        help="wrap the prompt in the tokenizer_config.json chat template")
    parser.add_argument("--threads", type=int, default=None)


def run(args) -> int:
    """Streams the text to stdout, then the figures to stderr; 1 with a message on error."""
    import sys

    try:
        generator = TextGenerator(args.model, args.tokenizer, args.threads)
        for piece in generator.stream(args.prompt, args.max_new_tokens, args.temperature,
                                      args.top_k, args.top_p, args.seed, tuple(args.stop),
                                      args.chat):
            sys.stdout.write(piece)
            sys.stdout.flush()
    except (ValueError, FileNotFoundError, ImportError, RuntimeError) as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    s = generator.last_stats
    print()
    print(f"[{s.prompt_tokens} prompt tokens, prefill {s.prefill_ms:.1f} ms, "
          f"{s.new_tokens} new tokens at {s.decode_tokens_per_s:.1f} tokens/s, "
          f"stopped by {s.stopped_by}]", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m onnx_light generate",
                                     description="Generate text with a prepared decoder.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
