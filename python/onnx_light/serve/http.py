"""A small HTTP/1.1 server on asyncio streams: what an OpenAI-style JSON API needs, no more.

- Requests: a request line, headers, and a body given by Content-Length (chunked request
  bodies are refused with 501); `Expect: 100-continue` is answered. Sizes are bounded
  (Limits): the head by max_head_bytes (431), the body by max_body_bytes (413).
- Responses: a whole body with Content-Length, or a stream in chunked transfer encoding
  (server-sent events), so a connection can be kept alive after either.
- Keep-alive: HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 closes it
  unless `Connection: keep-alive`. Requests on one connection are answered in order.
- Disconnects: while a request is handled, the connection is watched for end of input. A
  client that closes (or half-closes) its side cancels the handler task, and with it the
  generation it awaits. Bytes a pipelining client sends meanwhile are kept for the next
  request.

The application is an object with `async handle(request, responder)` and
`error_body(status, message) -> bytes` (JSON), so every error, including a malformed
request line, is answered in the application's error format.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
           413: "Content Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}
log = logging.getLogger("onnx_light.serve")
_LINGER_S, _LINGER_BYTES = 2.0, 1 << 20  # reading a refused request's rest before closing
_TOKEN = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclasses.dataclass(frozen=True)
class Limits:
    max_head_bytes: int = 16 * 1024      # request line + headers
    max_headers: int = 100
    max_body_bytes: int = 1024 * 1024
    idle_timeout_s: float = 60.0         # waiting for (the rest of) a request


class HttpError(Exception):
    """A request the server refuses before the application sees it (the connection closes)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclasses.dataclass
class Request:
    method: str
    path: str             # the target without its query
    query: str
    version: str          # "HTTP/1.1" or "HTTP/1.0"
    headers: dict         # lower-case names; repeated headers joined with ", "
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


class Connection:
    """The reading side of one client connection, with its own buffer so that reading ahead
    (to notice a disconnect) never loses bytes."""

    def __init__(self, reader: asyncio.StreamReader, limits: Limits):
        self.reader, self.limits = reader, limits
        self.buffer = bytearray()
        self.eof = False

    async def _fill(self) -> None:
        data = await self.reader.read(65536)
        if data:
            self.buffer += data
        else:
            self.eof = True

    async def read_head(self) -> bytes | None:
        """The bytes up to the blank line (excluded); None if the client closed cleanly
        between requests."""
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                if end > self.limits.max_head_bytes:
                    raise HttpError(431, "the request head is too large")
                head = bytes(self.buffer[:end])
                del self.buffer[:end + 4]
                return head
            if len(self.buffer) > self.limits.max_head_bytes:
                raise HttpError(431, "the request head is too large")
            if self.eof:
                if self.buffer.strip():
                    raise HttpError(400, "the connection closed in the middle of a request")
                return None
            await self._fill()

    async def read_body(self, length: int) -> bytes:
        while len(self.buffer) < length:
            if self.eof:
                raise HttpError(400, "the connection closed before the whole body arrived")
            await self._fill()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body

    async def wait_disconnect(self) -> None:
        """Returns when the client closes its side. Keeps what a pipelining client sends; past
        one request's worth of bytes it stops reading (and so stops watching)."""
        cap = self.limits.max_head_bytes + self.limits.max_body_bytes
        while not self.eof and len(self.buffer) <= cap:
            await self._fill()
        if not self.eof:
            await asyncio.get_running_loop().create_future()  # never completes


def parse_head(head: bytes, limits: Limits) -> Request:
    """The request line and headers (RFC 9112 syntax, strictly: no obsolete line folding)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise HttpError(400, "the request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or set(parts[0]) - _TOKEN or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported protocol version '{version}'")
    if len(lines) - 1 > limits.max_headers:
        raise HttpError(431, f"more than {limits.max_headers} headers")
    headers: dict = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or set(name) - _TOKEN:
            raise HttpError(400, f"malformed header line {line[:40]!r}")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    path, _, query = target.partition("?")
    return Request(method, path, query, version, headers)


async def read_request(conn: Connection, writer: asyncio.StreamWriter) -> Request | None:
    """One whole request, or None at a clean end of the connection."""
    head = await conn.read_head()
    if head is None:
        return None
    request = parse_head(head, conn.limits)
    if "transfer-encoding" in request.headers:
        raise HttpError(501, "chunked request bodies are not supported: send Content-Length")
    length_text = request.headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HttpError(400, f"invalid Content-Length {length_text[:20]!r}")
    length = int(length_text)
    if length > conn.limits.max_body_bytes:
        raise HttpError(413, f"the body has {length} bytes; at most "
                             f"{conn.limits.max_body_bytes} are accepted")
    if length and request.headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    request.body = await conn.read_body(length)
    return request


class Responder:
    """Writes one response: send() a whole body, or start_stream() / write() / end()."""

    def __init__(self, writer: asyncio.StreamWriter, keep_alive: bool):
        self.writer, self.keep_alive = writer, keep_alive
        self.started = False   # the status line has been written
        self.finished = False  # the response is complete

    def _head(self, status: int, headers: dict) -> bytes:
        headers = dict(headers, Connection="keep-alive" if self.keep_alive else "close")
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, body: bytes, content_type: str = "application/json",
                   headers: dict | None = None) -> None:
        assert not self.started, "a response was already started"
        self.started = True
        head = self._head(status, {"Content-Type": content_type,
                                   "Content-Length": str(len(body)), **(headers or {})})
        self.writer.write(head + body)
        await self.writer.drain()
        self.finished = True

    async def start_stream(self, status: int = 200, content_type: str = "text/event-stream",
                           headers: dict | None = None) -> None:
        assert not self.started, "a response was already started"
        self.started = True
        self.writer.write(self._head(status, {"Content-Type": content_type,
                                              "Cache-Control": "no-cache",
                                              "Transfer-Encoding": "chunked",
                                              **(headers or {})}))
        await self.writer.drain()

    async def write(self, data: bytes) -> None:
        """One chunk, sent at once. A client gone away raises ConnectionError here."""
        if data:
            self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await self.writer.drain()

    async def end(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()
        self.finished = True


async def _answer_error(conn: Connection, writer, app, status: int, message: str) -> None:
    """The error, then a lingering close: closing with unread input would reset the
    connection, and the client could lose the answer before reading it."""
    responder = Responder(writer, keep_alive=False)
    with contextlib.suppress(ConnectionError):
        await responder.send(status, app.error_body(status, message))
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(_discard_input(conn), _LINGER_S)


async def _discard_input(conn: Connection) -> None:
    """Reads and drops the client's input until it closes (at most _LINGER_BYTES)."""
    dropped = 0
    while not conn.eof and dropped < _LINGER_BYTES:
        dropped += len(conn.buffer)
        conn.buffer.clear()
        await conn._fill()


async def _handle_one(conn: Connection, writer, app, request: Request) -> bool:
    """Runs the application on one request, cancelled if the client disconnects meanwhile.
    Returns whether the connection may serve another request."""
    responder = Responder(writer, request.keep_alive)
    handler = asyncio.ensure_future(app.handle(request, responder))
    watcher = asyncio.ensure_future(conn.wait_disconnect())
    try:
        await asyncio.wait([handler, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not handler.done():  # the client went away (or this task was cancelled)
            handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await handler
    if handler.cancelled() or isinstance(handler.exception(), ConnectionError):
        return False  # the client went away
    if handler.exception() is not None:  # an application bug: log it, never show it
        log.error("unhandled error answering %s %s", request.method, request.path,
                  exc_info=handler.exception())
        if not responder.started:
            await _answer_error(conn, writer, app, 500, "internal server error")
        return False
    return responder.finished and responder.keep_alive and not conn.eof


async def handle_connection(reader, writer, app, limits: Limits) -> None:
    """Serves the requests of one connection in order until either side closes it."""
    conn = Connection(reader, limits)
    try:
        while True:
            try:
                request = await asyncio.wait_for(read_request(conn, writer),
                                                 limits.idle_timeout_s)
            except HttpError as exc:
                await _answer_error(conn, writer, app, exc.status, exc.message)
                return
            except asyncio.TimeoutError:
                if conn.buffer:
                    await _answer_error(conn, writer, app, 408,
                                        "the request was not received in time")
                return
            if request is None or not await _handle_one(conn, writer, app, request):
                return
    except ConnectionError:
        pass  # the client went away; nothing to answer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class HttpServer:
    """The listening socket and its connections: start() binds (port 0: any free port),
    close() stops accepting and cancels the connections' handlers."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 8000,
                 limits: Limits = Limits()):
        self.app, self.host, self.port, self.limits = app, host, port, limits
        self._server: asyncio.base_events.Server | None = None
        self._connections: set = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port,
                                                  limit=self.limits.max_head_bytes * 2)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _on_connection(self, reader, writer) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await handle_connection(reader, writer, self.app, self.limits)
        except asyncio.CancelledError:
            pass  # close() stops it; asyncio would log a cancelled connection task as an error
        finally:
            self._connections.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
