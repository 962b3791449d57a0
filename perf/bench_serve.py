"""Load on the OpenAI-compatible server: N concurrent streaming clients for a fixed time.

    .venv/bin/python perf/bench_serve.py [--clients 32] [--duration 30] [--max-tokens 64]
        [--model M --tokenizer T | --url http://HOST:PORT] [--json OUT]

Starts `python -m onnx_light serve --demo --port 0` (or MODEL --tokenizer T) as a separate
process on loopback, unless --url names a running server. Each client sends streaming
/v1/completions requests one after the other on one keep-alive connection until the time
is up (requests running then are finished, and not counted). Reported: completed requests/s
and completion tokens/s over the window, time to first token (request sent -> first text
event) and the gap between consecutive text events, p50 and p99, and errors. With the demo's
character tokenizer one text event is one token. The clients are asyncio sockets in this
process; on a small machine they share its cores with the server (say so with the figures).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(args) -> tuple[subprocess.Popen, int]:
    """The server in its own process; its first stdout line gives the bound port."""
    source = ["--demo"] if not args.model else [args.model, "--tokenizer", args.tokenizer]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "onnx_light", "serve", *source, "--port", "0",
         "--max-in-flight", str(args.max_in_flight), "--max-queue", str(args.clients)],
        stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if "127.0.0.1:" not in line:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, int(line.split("127.0.0.1:")[1].split("/")[0])


async def read_head(reader) -> int:
    status = int((await reader.readline()).split()[1])
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return status


async def stream_once(reader, writer, body: bytes, record: dict) -> None:
    """One streaming request; appends its event times and completion tokens to `record`."""
    sent = time.perf_counter()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    if await read_head(reader) != 200:
        raise RuntimeError("status is not 200")
    times, buffered, usage = [], b"", None
    while True:
        size = int((await reader.readline()).strip(), 16)  # chunked transfer encoding
        if size == 0:
            await reader.readline()
            break
        buffered += (await reader.readexactly(size + 2))[:-2]
        *events, buffered = buffered.split(b"\n\n")
        for event in events:
            data = event[len(b"data: "):]
            if data == b"[DONE]":
                continue
            obj = json.loads(data)
            if obj["choices"] and obj["choices"][0]["text"]:
                times.append(time.perf_counter())
            if obj.get("usage"):
                usage = obj["usage"]["completion_tokens"]
    record["ttft"].append(times[0] - sent)
    record["gaps"].extend(np.diff(times).tolist())
    record["tokens"] += usage or 0
    record["requests"] += 1


async def client(i: int, host: str, port: int, args, deadline: float, record: dict) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    j = 0
    try:
        while time.perf_counter() < deadline:
            body = json.dumps({"prompt": f"client {i} request {j}: ", "max_tokens": args.max_tokens,
                               "temperature": 0, "stream": True,
                               "stream_options": {"include_usage": True}}).encode()
            try:
                await stream_once(reader, writer, body, record)
            except (RuntimeError, ValueError, asyncio.IncompleteReadError, ConnectionError):
                record["errors"] += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
            j += 1
    finally:
        writer.close()


async def load(host: str, port: int, args) -> dict:
    """Runs the clients; returns what had finished when the time was up."""
    deadline = time.perf_counter() + args.duration
    record = {"ttft": [], "gaps": [], "tokens": 0, "requests": 0, "errors": 0}
    tasks = [asyncio.ensure_future(client(i, host, port, args, deadline, record))
             for i in range(args.clients)]
    await asyncio.sleep(max(deadline - time.perf_counter(), 0))
    window = {k: list(v) if isinstance(v, list) else v for k, v in record.items()}
    await asyncio.gather(*tasks)  # the requests running at the deadline, not counted
    return window


def _ms(values, q):
    return round(float(np.percentile(values, q)) * 1e3, 2) if values else None


def summary(window: dict, args) -> dict:
    seconds = args.duration
    return {"clients": args.clients, "duration_s": seconds, "max_tokens": args.max_tokens,
            "max_in_flight": args.max_in_flight, "model": args.model or "demo",
            "requests": window["requests"], "errors": window["errors"],
            "requests_per_s": round(window["requests"] / seconds, 2),
            "tokens_per_s": round(window["tokens"] / seconds, 1),
            "ttft_ms_p50": _ms(window["ttft"], 50), "ttft_ms_p99": _ms(window["ttft"], 99),
            "gap_ms_p50": _ms(window["gaps"], 50), "gap_ms_p99": _ms(window["gaps"], 99)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-in-flight", type=int, default=32,
                        help="the started server's --max-in-flight")
    parser.add_argument("--model", help="serve this model instead of --demo")
    parser.add_argument("--tokenizer")
    parser.add_argument("--url", help="load a running server instead of starting one")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    proc = None
    if args.url:
        parts = urlsplit(args.url)
        host, port = parts.hostname, parts.port
    else:
        proc, port = start_server(args)
        host = "127.0.0.1"
    try:
        result = summary(asyncio.run(load(host, port, args)), args)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    print(f"{args.clients} streaming clients for {args.duration:g} s, max_tokens "
          f"{args.max_tokens}, model {result['model']}, {args.max_in_flight} in flight")
    print("| requests/s | tokens/s | TTFT p50 | TTFT p99 | gap p50 | gap p99 | errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {result['requests_per_s']} | {result['tokens_per_s']} | "
          f"{result['ttft_ms_p50']} ms | {result['ttft_ms_p99']} ms | {result['gap_ms_p50']} ms "
          f"| {result['gap_ms_p99']} ms | {result['errors']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
