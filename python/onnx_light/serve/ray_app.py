"""The OpenAI-compatible API as a Ray Serve deployment: the same OpenAIApp handler as
`python -m onnx_light serve`, behind Ray's HTTP proxy, so replicas are scaled, placed and
load-balanced with Ray's own tools (num_replicas, autoscaling_config, ray_actor_options).

    from ray import serve
    from onnx_light.serve import ray_app
    serve.run(ray_app.app(demo=True), route_prefix="/")                 # the demo decoder
    serve.run(ray_app.app("model.onnx", "tokenizer_dir", num_replicas=2))
    # or from the shell: serve run onnx_light.serve.ray_app:build model=M tokenizer=T

Each replica loads the model and runs its own runtime.RequestScheduler. Ray is optional:
only this module imports it (pip install "ray[serve]").
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

try:
    from ray import serve
    from starlette.responses import Response, StreamingResponse
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("onnx_light.serve.ray_app needs Ray Serve, which onnx-light does not "
                      "install: pip install \"ray[serve]\"") from exc

from onnx_light.serve.http import Limits, Request

log = logging.getLogger("onnx_light.serve")


class _Responder:
    """What OpenAIApp writes, turned into a Starlette response: a whole body, or a stream
    fed through a queue (Ray's proxy does the HTTP framing)."""

    def __init__(self):
        self.started = self.finished = False
        self.ready = asyncio.Event()  # the status is known: `response` can be returned
        self.response = None
        self.chunks: asyncio.Queue = asyncio.Queue()

    async def send(self, status, body, content_type="application/json", headers=None):
        self.started = self.finished = True
        self.response = Response(body, status, headers, media_type=content_type)
        self.ready.set()

    async def start_stream(self, status=200, content_type="text/event-stream", headers=None):
        self.started = True
        self.response = (status, content_type, dict(headers or {}, **{"Cache-Control":
                                                                      "no-cache"}))
        self.ready.set()

    async def write(self, data: bytes) -> None:
        self.chunks.put_nowait(data)

    async def end(self) -> None:
        self.finished = True
        self.chunks.put_nowait(None)


async def _drain(responder: _Responder, handler: asyncio.Task):
    """The stream's chunks until the end; closing it early (the client went away) cancels
    the handler, and with it the generation."""
    try:
        while (chunk := await responder.chunks.get()) is not None:
            yield chunk
    finally:
        if not handler.done():
            handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler


def _request(scope: dict, headers, body: bytes) -> Request:
    """onnx_light.serve.http's Request from an ASGI request (the route prefix removed)."""
    path, root = scope.get("path", "/"), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return Request(scope["method"], path, scope.get("query_string", b"").decode("latin-1"),
                   "HTTP/1.1", {k.lower(): v for k, v in headers.items()}, body)


@serve.deployment
class OpenAIDeployment:
    """One replica: the model, its scheduler and the handler (onnx_light.serve.OpenAIApp)."""

    def __init__(self, model: str | None = None, tokenizer: str | None = None,
                 demo: bool = False, **options):
        from onnx_light.serve import build_app, demo_app

        self.app = demo_app(**options) if demo else build_app(model, tokenizer, **options)
        self.max_body_bytes = Limits.max_body_bytes

    async def __call__(self, http_request):
        body = await http_request.body()
        if len(body) > self.max_body_bytes:
            return Response(self.app.error_body(413, "the body is too large"), 413,
                            media_type="application/json")
        responder = _Responder()
        request = _request(http_request.scope, http_request.headers, body)
        handler = asyncio.ensure_future(self.app.handle(request, responder))
        ready = asyncio.ensure_future(responder.ready.wait())
        try:
            await asyncio.wait([handler, ready], return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not responder.ready.is_set():  # the handler failed before answering (a bug)
            log.error("unhandled error answering %s", request.path,
                      exc_info=None if handler.cancelled() else handler.exception())
            return Response(self.app.error_body(500, "internal server error"), 500,
                            media_type="application/json")
        if isinstance(responder.response, Response):
            await handler
            return responder.response
        status, content_type, headers = responder.response
        # However the handler ends, the stream ends (OpenAIApp normally ends it itself).
        handler.add_done_callback(lambda _: responder.chunks.put_nowait(None))
        return StreamingResponse(_drain(responder, handler), status, headers,
                                 media_type=content_type)


def app(model: str | None = None, tokenizer: str | None = None, demo: bool = False,
        num_replicas: int | str | None = None, **options):
    """A Ray Serve application to serve.run(): the model (or demo=True) in `num_replicas`
    replicas ("auto": Ray's autoscaling). `options` go to OpenAIApp (model_name,
    max_in_flight, max_queue, default_max_tokens, max_kv_tokens, kv_admission, threads)."""
    if not demo and not (model and tokenizer):
        raise ValueError("give model and tokenizer, or demo=True")
    deployment = OpenAIDeployment
    if num_replicas is not None:
        deployment = deployment.options(num_replicas=num_replicas)
    return deployment.bind(model, tokenizer, demo, **options)


def build(args: dict):
    """For `serve run onnx_light.serve.ray_app:build model=M tokenizer=T` (or demo=1)."""
    args = dict(args)
    model, tokenizer = args.pop("model", None), args.pop("tokenizer", None)
    demo = str(args.pop("demo", "")).lower() in ("1", "true", "yes")
    replicas = args.pop("num_replicas", None)
    if replicas is not None and replicas != "auto":
        replicas = int(replicas)
    for key in ("max_in_flight", "max_queue", "default_max_tokens", "max_kv_tokens", "threads"):
        if key in args:
            args[key] = int(args[key])
    return app(model, tokenizer, demo, replicas, **args)
