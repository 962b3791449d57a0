"""An OpenAI-compatible HTTP server over the request scheduler (standard library only).

    python -m onnx_light serve MODEL --tokenizer DIR_OR_tokenizer.json [--port 8000]
    python -m onnx_light serve --demo            # the built-in tiny decoder, characters

    from onnx_light.serve import ServerThread, demo_app
    with ServerThread(demo_app(), port=0) as server:   # a background thread; port 0: any
        print(server.url)                               # http://127.0.0.1:PORT/v1

Parts: `http` (the HTTP/1.1 protocol on asyncio streams), `openai_api` (the endpoints over
onnx_light.text and runtime.RequestScheduler), `ray_app` (the same handler as a Ray Serve
deployment; Ray is optional). docs/serving.md shows each in use.
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading

from onnx_light.serve.http import HttpServer, Limits
from onnx_light.serve.openai_api import OpenAIApp

DEMO_NAME = "onnx-light-demo"

__all__ = ["OpenAIApp", "ServerThread", "build_app", "demo_app", "serve_forever"]


def demo_app(**options) -> OpenAIApp:
    """The API over onnx_light.demo's tiny decoder and character tokenizer (no files)."""
    from onnx_light import demo

    threads = options.pop("threads", None)
    return OpenAIApp(demo.text_generator(threads), options.pop("model_name", None) or DEMO_NAME,
                     **options)


def build_app(model_path: str, tokenizer_path: str, model_name: str | None = None,
              threads: int | None = None, **options) -> OpenAIApp:
    """The API over a prepared decoder and its Hugging Face tokenizer (onnx_light.text)."""
    from onnx_light.text import TextGenerator

    generator = TextGenerator(model_path, tokenizer_path, threads)
    name = model_name or os.path.splitext(os.path.basename(model_path))[0]
    return OpenAIApp(generator, name, **options)


async def serve_forever(app: OpenAIApp, host: str, port: int, limits: Limits = Limits(),
                        on_listening=None, stop: asyncio.Event | None = None) -> None:
    """Serves until `stop` is set (or the task is cancelled); on_listening(port) once bound."""
    server = HttpServer(app, host, port, limits)
    bound = await server.start()
    if on_listening is not None:
        on_listening(bound)
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()  # cancels the connections, and so their requests


class ServerThread:
    """The server on an event loop of its own in a background thread (tests, notebooks,
    docs): `.port` and `.url` once started; close() (or leaving `with`) stops it."""

    def __init__(self, app: OpenAIApp, host: str = "127.0.0.1", port: int = 0,
                 limits: Limits = Limits()):
        self.app, self.host, self.limits = app, host, limits
        self.port = port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="onnx-light-serve", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 60.0) -> "ServerThread":
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"the server did not start: {self._error}")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._stop = asyncio.Event()

        def listening(port: int) -> None:
            self.port = port
            self._ready.set()

        try:
            self._loop.run_until_complete(serve_forever(self.app, self.host, self.port,
                                                        self.limits, listening, self._stop))
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    def close(self, timeout: float = 60.0) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start() if not self._thread.is_alive() else self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------- the command

def add_arguments(parser) -> None:
    """The `python -m onnx_light serve` arguments."""
    parser.add_argument("model", nargs="?", help="an ONNX decoder with persistent_bindings "
                                                 "(see prepare); omit with --demo")
    parser.add_argument("--tokenizer", help="tokenizer.json, or a directory holding it")
    parser.add_argument("--demo", action="store_true",
                        help="serve the built-in demo decoder with a character tokenizer")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    parser.add_argument("--model-name", help="the model's id in the API (default: the "
                                             "file's name without .onnx)")
    parser.add_argument("--max-in-flight", type=int, default=8,
                        help="requests generating at once")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests waiting for a slot; one more is refused with 429")
    parser.add_argument("--max-kv-tokens", type=int, default=0,
                        help="KV budget in cached tokens over the requests generating (0: none)")
    parser.add_argument("--kv-admission", choices=("reserve_worst_case", "grow_and_preempt",
                                                     "grow_and_refuse"),
                        default="reserve_worst_case",
                        help="how the KV budget admits requests: reserve each one's worst "
                             "case, or charge its cache as it grows and preempt the newest "
                             "request when a step does not fit, or fail it (models with row "
                             "caches)")
    parser.add_argument("--default-max-tokens", type=int, default=256,
                        help="max_tokens of a request that gives none")
    parser.add_argument("--max-body-bytes", type=int, default=Limits.max_body_bytes)
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads of the model's session")


def _app_from_args(args) -> OpenAIApp:
    options = dict(model_name=args.model_name, threads=args.threads,
                   max_in_flight=args.max_in_flight, max_queue=args.max_queue,
                   default_max_tokens=args.default_max_tokens,
                   max_kv_tokens=args.max_kv_tokens, kv_admission=args.kv_admission)
    if args.demo:
        if args.model or args.tokenizer:
            raise ValueError("--demo serves the built-in model: give no MODEL nor --tokenizer")
        return demo_app(**options)
    if not args.model or not args.tokenizer:
        raise ValueError("give MODEL and --tokenizer, or --demo")
    return build_app(args.model, args.tokenizer, **options)


def run(args) -> int:
    """Serves until interrupted (Ctrl-C, SIGTERM); 1 with a message if it cannot start."""
    for name in ("max_in_flight", "max_queue", "default_max_tokens", "max_body_bytes",
                 "max_kv_tokens"):
        if getattr(args, name) < (0 if name in ("max_queue", "max_kv_tokens") else 1):
            print(f"error: --{name.replace('_', '-')} is too small", file=sys.stderr)
            return 1
    try:
        app = _app_from_args(args)
        # Before listening: the first request then pays neither the compile nor the packing.
        seconds = app.generator.warm_up()
    except (ValueError, FileNotFoundError, ImportError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"onnx-light serve: compiled the model and packed its weights in {seconds:.1f} s",
          file=sys.stderr, flush=True)
    limits = Limits(max_body_bytes=args.max_body_bytes)

    def listening(port: int) -> None:
        print(f"onnx-light serve: model '{app.model_name}' at http://{args.host}:{port}/v1 "
              f"(OpenAI API; {args.max_in_flight} in flight, {args.max_queue} queued at most)",
              flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await serve_forever(app, args.host, args.port, limits, listening, stop)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, the host is not ours
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
