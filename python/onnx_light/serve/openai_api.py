"""The OpenAI-compatible API over one model: a handler for onnx_light.serve.http (and for the
Ray Serve adapter), with no HTTP code of its own.

    POST /v1/completions       prompt -> text        (stream: server-sent events)
    POST /v1/chat/completions  messages -> message   (the model folder's chat template)
    GET  /v1/models, /v1/models/NAME, /health

Each generation is one request of a runtime.RequestScheduler (onnx_light.aio's stream), so
requests run concurrently, and cancelling the handler task (the client went away) cancels
the request before its next token. Text comes out through onnx_light.text.TextDecoder: no
partial character and no part of a stop string is ever sent. At most max_in_flight +
max_queue generations are accepted at once; one more is refused with 429.

Errors are OpenAI error objects, {"error": {"message", "type", "param", "code"}}, never a
traceback: 400 for malformed JSON, wrong types and values, an unknown model or parameters
this server does not support; 404/405 for an unknown path or method.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid

import onnx_light.aio  # noqa: F401 - adds RequestScheduler.stream
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.text import TextDecoder, generation_options

log = logging.getLogger("onnx_light.serve")

_ERROR_TYPES = {429: "rate_limit_error"}
_MAX_STOP = 4  # as OpenAI's API


class ApiError(Exception):
    """An error answered as an OpenAI error object with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        kind = _ERROR_TYPES.get(self.status,
                                "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param,
                          "code": self.code}}


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else _json(obj)) + b"\n\n"


# ---------------------------------------------------------------------------- parameters

_NUMBER = (int, float)
_KIND_NAMES = {str: "a string", bool: "a boolean", int: "an integer", _NUMBER: "a number",
               list: "an array", dict: "an object"}


def _get(body: dict, name: str, kind, default=None):
    """body[name] checked against `kind` (None or absent: default). bool is never a number."""
    value = body.get(name)
    if value is None:
        return default
    is_number = kind in (int, _NUMBER)
    if not isinstance(value, kind) or (is_number and isinstance(value, bool)):
        raise ApiError(400, f"'{name}' must be {_KIND_NAMES[kind]}, not {json.dumps(value)}",
                       name, "invalid_type")
    return value


def _in_range(body: dict, name: str, kind, default, low, high, low_open=False):
    value = _get(body, name, kind, default)
    if value is None:
        return None
    if value < low or value > high or (low_open and value == low):
        raise ApiError(400, f"'{name}' must be in {'(' if low_open else '['}{low}, {high}], "
                            f"not {value}", name, "invalid_value")
    return value


def _stop_strings(body: dict) -> tuple:
    stop = body.get("stop")
    if stop is None:
        return ()
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "'stop' must be a string or an array of strings", "stop",
                       "invalid_type")
    if len(stop) > _MAX_STOP:
        raise ApiError(400, f"'stop' has {len(stop)} strings; at most {_MAX_STOP} are "
                            "accepted", "stop", "invalid_value")
    return tuple(s for s in stop if s)


# Parameters of OpenAI's API this server does not implement: refused unless they have the
# value that means "off", so a client never silently gets something other than it asked for.
_UNSUPPORTED = {"best_of": (None, 1), "echo": (None, False), "logprobs": (None, False),
                "top_logprobs": (None, 0), "suffix": (None, ""), "logit_bias": (None, {}),
                "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
                "tools": (None, []), "functions": (None, []), "audio": (None,)}


def _refuse_unsupported(body: dict) -> None:
    for name, off in _UNSUPPORTED.items():
        if name in body and body[name] not in off:
            raise ApiError(400, f"'{name}' is not supported by this server", name,
                           "unsupported_parameter")
    n = _get(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (one choice per request), not {n}", "n",
                       "unsupported_value")


@dataclasses.dataclass
class Sampling:
    """The parameters of one generation, validated."""
    max_tokens: int | None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple = ()
    stream: bool = False
    include_usage: bool = False


def parse_sampling(body: dict, max_tokens_names=("max_tokens",)) -> Sampling:
    _refuse_unsupported(body)
    max_tokens = None
    for name in max_tokens_names:
        value = _get(body, name, int)
        if value is not None and value < 1:
            raise ApiError(400, f"'{name}' must be at least 1, not {value}", name,
                           "invalid_value")
        max_tokens = value if value is not None else max_tokens
    seed = _in_range(body, "seed", int, None, -2**63, 2**64 - 1)  # negative: as uint64
    top_k = _in_range(body, "top_k", int, 0, -1, 2**31 - 1)  # vLLM's extension; -1: off
    options = _get(body, "stream_options", dict, {})
    return Sampling(
        max_tokens=max_tokens,
        temperature=float(_in_range(body, "temperature", _NUMBER, 1.0, 0, 2)),
        top_p=float(_in_range(body, "top_p", _NUMBER, 1.0, 0, 1, low_open=True)),
        top_k=max(top_k, 0), seed=None if seed is None else seed % 2**64,
        stop=_stop_strings(body), stream=_get(body, "stream", bool, False),
        include_usage=_get(options, "include_usage", bool, False))


def _message_text(message, index: int) -> tuple:
    """(role, text) of one chat message; content may be a string or text parts."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError(400, f"'{where}' must be an object", "messages", "invalid_type")
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str):
        raise ApiError(400, f"'{where}.role' must be a string", "messages", "invalid_type")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and
                   isinstance(p.get("text"), str) for p in content):
            raise ApiError(400, f"'{where}.content' parts must be text parts "
                                "({\"type\": \"text\", \"text\": ...})", "messages",
                           "unsupported_value")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise ApiError(400, f"'{where}.content' must be a string or an array of text parts",
                       "messages", "invalid_type")
    return role, content


def parse_messages(body: dict) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array of messages", "messages",
                       "invalid_type" if messages is not None else "missing_required_parameter")
    return [dict(zip(("role", "content"), _message_text(m, i))) for i, m in enumerate(messages)]


def parse_prompt(body: dict):
    """A string, or token ids; OpenAI's one-element batch forms are accepted too."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)
    if prompt is None:
        raise ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter")
    raise ApiError(400, "'prompt' must be a string or an array of token ids (one prompt "
                        "per request)", "prompt", "invalid_type")


# ---------------------------------------------------------------------------- accounting

class ServerStats:
    """Counters of the server's requests, readable from any thread; wait_for() blocks until
    a condition on them holds (tests wait on it instead of sleeping)."""

    def __init__(self, recent: int = 64):
        self._cond = threading.Condition()
        self.counts = collections.Counter()
        self.recent = collections.deque(maxlen=recent)  # RequestHandle.stats() dicts

    def add(self, request_stats: dict | None = None, **counts) -> None:
        with self._cond:
            self.counts.update(counts)
            if request_stats is not None:
                self.recent.append(request_stats)
            self._cond.notify_all()

    def snapshot(self) -> dict:
        with self._cond:
            return {k: self.counts[k] for k in ("accepted", "completed", "cancelled",
                                                "disconnected", "rejected", "failed", "active")}

    def wait_for(self, predicate, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.snapshot()), timeout)


@dataclasses.dataclass
class Outcome:
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str = "length"


def _usage(prompt_tokens: int, outcome: Outcome) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": prompt_tokens + outcome.completion_tokens}


# ---------------------------------------------------------------------------- the handler

class OpenAIApp:
    """The API over one onnx_light.text.TextGenerator (model, tokenizer, settings, context)
    and one runtime.RequestScheduler built on its context."""

    def __init__(self, generator, model_name: str, max_in_flight: int = 8,
                 max_queue: int = 64, default_max_tokens: int = 256, max_kv_tokens: int = 0,
                 kv_admission: str = "reserve_worst_case"):
        self.generator, self.model_name = generator, model_name
        # max_kv_tokens/kv_admission: the scheduler's KV budget (runtime.RequestScheduler).
        self.scheduler = runtime.RequestScheduler(generator.context, max_in_flight=max_in_flight,
                                                  max_kv_tokens=max_kv_tokens,
                                                  kv_admission=kv_admission)
        self.capacity = max_in_flight + max_queue
        self.default_max_tokens = default_max_tokens
        self.vocab_size = _vocab_size(generator.model)
        self.created = int(time.time())
        self.stats = ServerStats()
        self.active = 0  # generations accepted and not finished (the event loop's thread)
        self.routes = {"/v1/completions": {"POST": self.completions},
                       "/v1/chat/completions": {"POST": self.chat_completions},
                       "/v1/models": {"GET": self.models},
                       f"/v1/models/{model_name}": {"GET": self.model_card},
                       "/health": {"GET": self.health}}

    def error_body(self, status: int, message: str) -> bytes:
        return _json(ApiError(status, message).body())

    async def handle(self, request, responder) -> None:
        """One request: routes it and turns every error into an OpenAI error object."""
        try:
            methods = self.routes.get(request.path.rstrip("/") or "/")
            if methods is None:
                raise ApiError(404, f"no such endpoint: {request.method} {request.path}",
                               code="unknown_url")
            if request.method not in methods:
                raise ApiError(405, f"{request.path} accepts {', '.join(methods)}, not "
                                    f"{request.method}", code="method_not_allowed",
                               headers={"Allow": ", ".join(methods)})
            await methods[request.method](request, responder)
        except ApiError as exc:
            await self._send_error(responder, exc)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:  # noqa: BLE001 - logged here, answered without the traceback
            log.exception("error answering %s %s", request.method, request.path)
            await self._send_error(responder, ApiError(500, "internal server error"))

    async def _send_error(self, responder, exc: ApiError) -> None:
        if not responder.started:
            await responder.send(exc.status, _json(exc.body()), headers=exc.headers)
        elif not responder.finished:  # mid-stream: an error event, then the end
            await responder.write(_sse(exc.body()) + _sse(b"[DONE]"))
            await responder.end()

    # ------------------------------------------------------------------ informational

    async def models(self, request, responder) -> None:
        await responder.send(200, _json({"object": "list", "data": [self._card()]}))

    async def model_card(self, request, responder) -> None:
        await responder.send(200, _json(self._card()))

    def _card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created,
                "owned_by": "onnx-light"}

    async def health(self, request, responder) -> None:
        await responder.send(200, _json({
            "status": "ok", "model": self.model_name, "in_flight": self.scheduler.in_flight,
            "queued": self.scheduler.queued, "capacity": self.capacity,
            **self.stats.snapshot()}))

    # ------------------------------------------------------------------ generation

    def _body(self, request) -> dict:
        try:
            body = json.loads(request.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}", code="invalid_json")
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(400, f"the model '{model}' does not exist; this server serves "
                                f"'{self.model_name}'", "model", "model_not_found")
        return body

    def _prompt_ids(self, prompt, chat: bool) -> list:
        """Token ids from text (the generator's tokenizer, BOS, chat template) or as given."""
        param = "messages" if chat else "prompt"
        try:
            ids = prompt if isinstance(prompt, list) and not chat else \
                self.generator.prompt_ids(prompt, chat=chat)
        except ValueError as exc:  # not encodable, empty, a template's raise_exception
            raise ApiError(400, str(exc), param, "invalid_value") from None
        bad = [t for t in ids if t < 0 or (self.vocab_size and t >= self.vocab_size)]
        if bad:
            raise ApiError(400, f"token id {bad[0]} is outside the vocabulary of "
                                f"{self.vocab_size} tokens", param, "invalid_value")
        return ids

    def _max_tokens(self, sampling: Sampling, prompt_tokens: int, param: str) -> int:
        """max_tokens (default: default_max_tokens) within the model's context length."""
        context = self.generator.settings.context_length
        room = context - prompt_tokens if context else None
        if room is not None and room < 1:
            raise ApiError(400, f"the prompt has {prompt_tokens} tokens; this model's context "
                                f"length is {context} tokens", param, "context_length_exceeded")
        if sampling.max_tokens is None:
            return self.default_max_tokens if room is None else min(self.default_max_tokens,
                                                                     room)
        if room is not None and sampling.max_tokens > room:
            raise ApiError(400, f"max_tokens {sampling.max_tokens} plus the prompt's "
                                f"{prompt_tokens} tokens exceed this model's context length "
                                f"of {context} tokens", "max_tokens", "context_length_exceeded")
        return sampling.max_tokens

    def _admit(self) -> None:
        if self.active >= self.capacity:
            self.stats.add(rejected=1)
            raise ApiError(429, f"the server is busy: {self.active} requests are running or "
                                "queued (--max-in-flight + --max-queue); retry later",
                           code="queue_full", headers={"Retry-After": "1"})
        self.active += 1
        self.stats.add(accepted=1, active=1)

    async def _generate(self, ids: list, sampling: Sampling, max_tokens: int,
                        on_piece) -> Outcome:
        """One generation through the scheduler; awaits on_piece(text) for each piece of text
        as it becomes showable. Stops at EOS, a stop string or max_tokens."""
        g = self.generator
        options = generation_options(g.settings, max_tokens, sampling.temperature,
                                     sampling.top_k, sampling.top_p, sampling.seed)
        eos = set(g.settings.eos_token_ids)
        decoder, outcome, handles = TextDecoder(g.tokenizer.decode, sampling.stop), Outcome(), []
        try:
            stream = self.scheduler.stream(g.model, g.feeds(ids), options, g.session_options,
                                           on_submit=handles.append)
            async with contextlib.aclosing(stream) as steps:
                async for tokens in steps:
                    token = int(tokens[0])
                    if token in eos:  # generation ends here by itself: no cancel
                        outcome.finish_reason = "stop"
                        continue
                    piece = decoder.push(token)
                    if piece:
                        await on_piece(piece)
                    if decoder.stopped:  # leaving the stream cancels the rest
                        outcome.finish_reason = "stop"
                        break
            rest = decoder.finish()
            if rest:
                await on_piece(rest)
        except (asyncio.CancelledError, ConnectionError):  # the client went away
            self.stats.add(disconnected=1)
            raise
        except (RuntimeError, ValueError, TypeError) as exc:  # the request's own (model) error
            log.error("generation failed: %s", exc)
            raise ApiError(500, f"generation failed: {exc}") from None
        finally:
            self._account(handles)
        outcome.text, outcome.completion_tokens = decoder.text, len(decoder.tokens)
        if outcome.finish_reason == "length" and len(decoder.tokens) < max_tokens:
            outcome.finish_reason = "stop"  # ended early, at a stop token
        return outcome

    def _account(self, handles: list) -> None:
        """Records the scheduler's stats of the request (and how it ended)."""
        handle = handles[0] if handles else None
        if handle is None or not handle.done():  # cancelled twice: do not block the loop
            self.stats.add(cancelled=int(handle is not None))
            return
        try:
            stats = handle.stats()
        except Exception:  # noqa: BLE001 - the request failed; its error is answered
            self.stats.add(failed=1)
            return
        self.stats.add(stats, completed=1, cancelled=int(stats["cancelled"]))

    def _release(self) -> None:
        self.active -= 1
        self.stats.add(active=-1)

    # ------------------------------------------------------------------ the endpoints

    async def completions(self, request, responder) -> None:
        body = self._body(request)
        sampling = parse_sampling(body)
        ids = self._prompt_ids(parse_prompt(body), chat=False)
        await self._complete(responder, ids, sampling, "prompt", _CompletionFormat())

    async def chat_completions(self, request, responder) -> None:
        body = self._body(request)
        sampling = parse_sampling(body, ("max_tokens", "max_completion_tokens"))
        ids = self._prompt_ids(parse_messages(body), chat=True)
        await self._complete(responder, ids, sampling, "messages", _ChatFormat())

    async def _complete(self, responder, ids, sampling: Sampling, param: str, fmt) -> None:
        """Validated request -> one generation, answered whole or as server-sent events."""
        max_tokens = self._max_tokens(sampling, len(ids), param)
        self._admit()
        try:
            head = {"id": f"{fmt.prefix}-{uuid.uuid4().hex}", "created": int(time.time()),
                    "model": self.model_name}
            if sampling.stream:
                await self._stream(responder, ids, sampling, max_tokens, fmt, head)
                return
            outcome = await self._generate(ids, sampling, max_tokens, _ignore)
            await responder.send(200, _json({**head, "object": fmt.object,
                                             "choices": [fmt.choice(outcome)],
                                             "usage": _usage(len(ids), outcome)}))
        finally:
            self._release()

    async def _stream(self, responder, ids, sampling, max_tokens, fmt, head) -> None:
        """Server-sent events: the pieces as they come, a last chunk with the finish reason,
        the usage chunk if stream_options.include_usage, then [DONE]."""
        usage_field = {"usage": None} if sampling.include_usage else {}

        def chunk(choices) -> bytes:
            return _sse({**head, "object": fmt.chunk_object, "choices": choices, **usage_field})

        async def on_piece(text: str) -> None:
            await responder.write(chunk([fmt.delta(text)]))

        await responder.start_stream()
        first = fmt.first_delta()
        if first is not None:
            await responder.write(chunk([first]))
        outcome = await self._generate(ids, sampling, max_tokens, on_piece)
        tail = chunk([fmt.last_delta(outcome.finish_reason)])
        if sampling.include_usage:
            tail += _sse({**head, "object": fmt.chunk_object, "choices": [],
                          "usage": _usage(len(ids), outcome)})
        await responder.write(tail + _sse(b"[DONE]"))
        await responder.end()


async def _ignore(text: str) -> None:
    pass


class _CompletionFormat:
    """/v1/completions objects."""
    prefix, object, chunk_object = "cmpl", "text_completion", "text_completion"

    def choice(self, outcome: Outcome) -> dict:
        return {"index": 0, "text": outcome.text, "logprobs": None,
                "finish_reason": outcome.finish_reason}

    def first_delta(self):
        return None

    def delta(self, text: str) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": None}

    def last_delta(self, finish_reason: str) -> dict:
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason}


class _ChatFormat:
    """/v1/chat/completions objects: the first chunk carries the role, the others content."""
    prefix, object, chunk_object = "chatcmpl", "chat.completion", "chat.completion.chunk"

    def choice(self, outcome: Outcome) -> dict:
        return {"index": 0, "message": {"role": "assistant", "content": outcome.text},
                "logprobs": None, "finish_reason": outcome.finish_reason}

    def first_delta(self) -> dict:
        return {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}

    def delta(self, text: str) -> dict:
        return {"index": 0, "delta": {"content": text}, "logprobs": None,
                "finish_reason": None}

    def last_delta(self, finish_reason: str) -> dict:
        return {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}


def _vocab_size(model) -> int | None:
    """The last dimension of the logits output when it is fixed (ids past it are refused)."""
    for output in model.graph.output:
        if output.name == "logits" and output.type.HasField("tensor_type"):
            dims = output.type.tensor_type.shape.dim
            if dims and dims[-1].HasField("dim_value"):
                return dims[-1].dim_value
    return None
