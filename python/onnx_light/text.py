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
the chat template from ``tokenizer_config.json`` or ``chat_template.jinja`` (``chat=True``;
needs jinja2).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from onnx_light import onnx as ol_onnx
from onnx_light.model_folder import model_file
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
    # tokenizer_config.json's bos_token/eos_token strings (chat templates use them)
    special_tokens: dict = field(default_factory=dict)
    context_length: int | None = None  # prompt + new tokens the model's positions allow
    # Width of one attention head: fills a cache's symbolic last dimension (the genai builder
    # declares it as 'kv_cache_dim').
    head_size: int | None = None


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


def _token_text(value) -> str | None:
    """tokenizer_config.json writes a special token as a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


def _head_size(dirs) -> int | None:
    """genai_config.json's model.decoder.head_size, else config.json's head_dim (or
    hidden_size / num_attention_heads), from the first directory that has one."""
    for d in dirs:
        for name in ("genai_config.json", "config.json"):
            path = os.path.join(d, name)
            if not os.path.isfile(path):
                continue
            with open(path) as f:
                data = json.load(f)
            if name == "genai_config.json":
                size = data.get("model", {}).get("decoder", {}).get("head_size")
            else:
                size = data.get("head_dim")
                if not isinstance(size, int) and isinstance(data.get("hidden_size"), int) and \
                        isinstance(data.get("num_attention_heads"), int):
                    size = data["hidden_size"] // data["num_attention_heads"]
            if isinstance(size, int) and size > 0:
                return size
    return None


def _context_length(dirs) -> int | None:
    """genai_config.json's model.context_length, else config.json's max_position_embeddings
    (or n_positions), from the first directory that has one."""
    for d in dirs:
        for name, keys in (("genai_config.json", ("context_length",)),
                           ("config.json", ("max_position_embeddings", "n_positions"))):
            path = os.path.join(d, name)
            if not os.path.isfile(path):
                continue
            with open(path) as f:
                data = json.load(f)
            source = data.get("model", data) if name == "genai_config.json" else data
            for key in keys:
                if isinstance(source.get(key), int):
                    return source[key]
    return None


def read_settings(*dirs: str) -> ModelSettings:
    """EOS/BOS from the first of genai_config.json, generation_config.json, config.json found
    in `dirs` (in order); the special token strings from the first tokenizer_config.json and
    the chat template from it or, as transformers' save_pretrained now writes it, from
    chat_template.jinja; the context length as _context_length finds it."""
    settings = ModelSettings(context_length=_context_length(dirs), head_size=_head_size(dirs))
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
                config = json.load(f)
            settings.chat_template = _named_template(config.get("chat_template"))
            settings.special_tokens = {k: _token_text(config[k]) for k in
                                       ("bos_token", "eos_token") if config.get(k)}
        jinja = os.path.join(d, "chat_template.jinja")
        if settings.chat_template is None and os.path.isfile(jinja):
            with open(jinja) as f:
                settings.chat_template = f.read()
    return settings


def _named_template(value) -> str | None:
    """tokenizer_config.json's chat_template: a string, or a list of {"name", "template"}
    (the one named "default")."""
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default")
    return value


def empty_caches(model, head_size: int | None = None) -> dict:
    """Zeros for every bound input: a symbolic first dimension (batch) 1, the symbolic last
    dimension of a rank-4 cache [batch, kv_heads, past, head] `head_size` (an empty cache
    still has its head width), the others (the past length) 0. A paged cache (`prepare
    --paged cache`) starts as {"blocks": []}, a sequence of row caches (`--paged rows`) as one
    empty row."""
    declared = {v.name: v for v in model.graph.input}
    caches = {}
    for binding in model.graph.persistent_bindings:
        value = declared.get(binding.input_name)
        if value is not None and value.type.HasField("struct_type"):
            caches[binding.input_name] = {"blocks": []}
            continue
        if value is not None and value.type.HasField("sequence_type") and \
                value.type.sequence_type.elem_type.HasField("struct_type"):
            caches[binding.input_name] = [{"blocks": []}]
            continue
        if value is None or not value.type.HasField("tensor_type"):
            raise ValueError(f"bound input '{binding.input_name}' has no declared tensor type")
        tensor = value.type.tensor_type
        dtype = _ELEMENT_TYPES.get(tensor.elem_type)
        if dtype is None:
            raise ValueError(f"bound input '{binding.input_name}' has element type "
                             f"{tensor.elem_type}, which empty caches do not support")
        dims = tensor.shape.dim
        shape = [d.dim_value if d.HasField("dim_value") else (1 if i == 0 else 0)
                 for i, d in enumerate(dims)]
        if len(dims) == 4 and not dims[3].HasField("dim_value"):
            if head_size is None:
                raise ValueError(
                    f"bound input '{binding.input_name}' declares its head dimension as "
                    f"'{dims[3].dim_param or '?'}': give the head size (genai_config.json's "
                    f"model.decoder.head_size or config.json's head_dim beside the model)")
            shape[3] = head_size
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


class TextDecoder:
    """Turns tokens into text as they arrive: push(token) returns the text that may be shown
    now (never a partial character nor the start of a stop string), finish() the rest.
    Once a stop string appears, `stopped` is set and the text ends before it."""

    def __init__(self, decode, stop: tuple = ()):
        self.decode, self.stop = decode, tuple(s for s in stop if s)
        self.tokens: list = []
        self.text = ""        # shown so far
        self._full = ""       # the decoding of every token (cut at a stop string)
        self.stopped = False

    def push(self, token: int) -> str:
        # Decoding the whole completion each time lets the tokenizer join multi-token
        # characters and apply its decoder's rules (e.g. Metaspace) exactly as at the end.
        self.tokens.append(token)
        full = self.decode(self.tokens)
        hits = [i for i in (full.find(s) for s in self.stop) if i >= 0]
        if hits:
            self._full, self.stopped = full[:min(hits)], True
            return self.finish()
        self._full = full
        safe = _held_back(full, self.stop)
        if safe <= len(self.text):
            return ""
        piece, self.text = full[len(self.text):safe], full[:safe]
        return piece

    def finish(self) -> str:
        """The text held back so far (the generation ended)."""
        piece = self._full[len(self.text):]
        self.text = self._full
        return piece


def render_chat(template: str, messages: list, special_tokens: dict | None = None) -> str:
    """A Hugging Face chat template rendered as transformers does (sandboxed jinja2, trimmed
    blocks, the generation prompt added)."""
    try:
        import jinja2
        import jinja2.sandbox
    except ImportError as exc:  # pragma: no cover - jinja2 ships with transformers
        raise ImportError("chat templates need jinja2: pip install jinja2") from exc

    def raise_exception(message):
        raise ValueError(f"chat template: {message}")

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                                **(special_tokens or {}))
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template: {exc}") from exc


def generation_options(settings: ModelSettings, max_new_tokens: int, temperature: float = 0.0,
                       top_k: int = 0, top_p: float = 1.0, seed: int | None = None):
    """runtime.GenerationOptions with the model's EOS tokens (the first ends generation, the
    others are stop tokens)."""
    options = runtime.GenerationOptions(max_new_tokens=max_new_tokens, temperature=temperature,
                                        top_k=top_k, top_p=top_p, seed=seed)
    eos = settings.eos_token_ids
    if eos:
        options.eos_token_id = eos[0]
        options.stop_token_ids = eos[1:]
    return options


class TextGenerator:
    """One model and tokenizer; stream() runs one generation and yields decoded text."""

    def __init__(self, model_path: str, tokenizer_path: str, threads: int | None = None):
        model_path = model_file(model_path)
        model = ol_onnx.load_model(model_path)
        if len(model.graph.persistent_bindings) == 0 and any(
                i.name.startswith("past") for i in model.graph.input):
            raise ValueError(f"'{model_path}' has cache inputs but no persistent_bindings: "
                             "run `python -m onnx_light prepare` on it first")
        tokenizer = load_tokenizer(tokenizer_path)
        tokenizer_dir = tokenizer_path if os.path.isdir(tokenizer_path) else \
            os.path.dirname(os.path.abspath(tokenizer_path))
        settings = read_settings(os.path.dirname(os.path.abspath(model_path)), tokenizer_dir)
        self._setup(model, tokenizer, settings, threads)

    @classmethod
    def from_objects(cls, model, tokenizer, settings: ModelSettings | None = None,
                     threads: int | None = None) -> "TextGenerator":
        """A generator on a model already in memory and any tokenizer with the `tokenizers`
        interface: encode(text, add_special_tokens=...).ids and decode(ids)."""
        generator = cls.__new__(cls)
        generator._setup(model, tokenizer, settings or ModelSettings(), threads)
        return generator

    def _setup(self, model, tokenizer, settings: ModelSettings, threads: int | None) -> None:
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        empty_caches(model, settings.head_size)  # a cache it cannot shape fails here, not per call
        opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
                    or [18])
        self.context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(opset)))
        self.session_options = runtime.RuntimeSessionOptions()
        if threads:
            self.session_options.intra_op_threads = threads
        self.last_stats = TextStats()

    def prompt_ids(self, prompt, chat: bool = False) -> list:
        """Token ids of a prompt (BOS added if the model has one), or with chat=True of the
        chat template applied to `prompt`: a user message's text or a list of messages."""
        if chat:
            prompt = self.apply_chat_template(
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt)
        ids = self.tokenizer.encode(prompt, add_special_tokens=not chat).ids
        bos = self.settings.bos_token_id
        if bos is not None and not chat and (not ids or ids[0] != bos):
            ids = [bos] + ids
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        return ids

    def apply_chat_template(self, messages: list) -> str:
        if not self.settings.chat_template:
            raise ValueError("chat=True but no chat template (tokenizer_config.json's "
                             "chat_template or chat_template.jinja) was found beside the model "
                             "or the tokenizer")
        return render_chat(self.settings.chat_template, messages, self.settings.special_tokens)

    def check_context(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Refuses, naming the limit, a prompt or a generation that would run past the model's
        positions (context_length / max_position_embeddings beside the model): otherwise it
        would fail deep in the graph, or read past a position table."""
        limit = self.settings.context_length
        if limit is None:
            return  # runtime.generate still refuses a position past a table it can see
        if prompt_tokens >= limit:
            raise ValueError(f"the prompt has {prompt_tokens} tokens; the model's context "
                             f"length is {limit} positions, which leaves no room to generate")
        if prompt_tokens + max_new_tokens > limit:
            raise ValueError(f"the prompt's {prompt_tokens} tokens plus max_new_tokens "
                             f"{max_new_tokens} exceed the model's context length of {limit} "
                             f"positions: ask for at most {limit - prompt_tokens} new tokens")

    def warm_up(self) -> float:
        """Compiles the model's session and packs its weights: one generation of two tokens
        from a one-token prompt on the session every later request shares, so that the first
        request does not pay for them (a server does this before it listens). Returns the
        seconds it took."""
        bos = self.settings.bos_token_id
        start = time.perf_counter()
        runtime.generate(self.model, self.context, self.feeds([0 if bos is None else bos]),
                         runtime.GenerationOptions(max_new_tokens=2), self.session_options)
        return time.perf_counter() - start

    def feeds(self, ids: list) -> dict:
        """input_ids [1, len(ids)] and empty caches: the feeds of one generation."""
        return {"input_ids": np.asarray([ids], np.int64),
                **empty_caches(self.model, self.settings.head_size)}

    def stream(self, prompt: str, max_new_tokens: int = 64, temperature: float = 0.0,
               top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               stop: tuple = (), chat: bool = False):
        """Yields the text of each new token as it is published (the suffix the new token adds
        to the decoded text, so multi-token characters come out whole). Stops at EOS, at a
        stop string (not yielded) or after max_new_tokens; sets self.last_stats. Refuses
        (check_context) a generation that would run past the model's context length."""
        ids = self.prompt_ids(prompt, chat)
        self.check_context(len(ids), max_new_tokens)
        options = generation_options(self.settings, max_new_tokens, temperature, top_k, top_p,
                                     seed)
        eos = self.settings.eos_token_ids
        stats = TextStats(prompt_tokens=len(ids), stopped_by="max_new_tokens")
        decoder = TextDecoder(self.tokenizer.decode, stop)
        start, first = time.perf_counter(), None
        for tokens in generate_stream(self.model, self.context, self.feeds(ids), options,
                                      self.session_options):
            token = int(tokens[0])
            now = time.perf_counter()
            if first is None:
                first = now
                stats.prefill_ms = (now - start) * 1e3
            if token in eos:
                stats.stopped_by = "eos"
                break
            piece = decoder.push(token)
            if piece:
                yield piece
            if decoder.stopped:
                stats.stopped_by = "stop string"
                break
        rest = decoder.finish()
        if rest:
            yield rest
        new = decoder.tokens
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
