"""Checks the Ray Serve deployment (onnx_light.serve.ray_app) end to end, by hand: Ray is not
a requirement of onnx-light, so this is a script, not a pytest test.

    .venv/bin/python -m pip install "ray[serve]"
    .venv/bin/python tests/serve/ray_check.py [--replicas 2] [--port 8765]

It starts a local Ray instance (no dashboard), deploys the demo decoder with Ray Serve's HTTP
proxy on 127.0.0.1, and checks over plain HTTP that
  - a greedy /v1/completions answer is exactly the text runtime.generate gives alone, with
    exact usage counts;
  - the same request streamed (server-sent events) joins to the same text and ends with
    data: [DONE];
  - a bad request (n=2) is a 400 OpenAI error object;
then shuts Ray down. Prints what it checked; exits 0 when all hold, 1 otherwise.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

PROMPT = "onnx-light generates "


def expected(max_tokens: int) -> str:
    """What runtime.generate picks alone for PROMPT on the demo decoder, decoded."""
    from onnx_light import demo
    from onnx_light.onnx_py._onnxpykernels import runtime

    gen = demo.text_generator()
    ids = demo.encode(PROMPT)
    out = runtime.generate(gen.model, gen.context, gen.feeds(ids),
                           runtime.GenerationOptions(max_new_tokens=max_tokens))
    return demo.decode(np.from_dlpack(out)[0, len(ids):])


def post(port: int, body: dict) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def check(port: int) -> list[str]:
    """The failures (empty: all good)."""
    failures, want = [], expected(16)
    request = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    status, data = post(port, request)
    reply = json.loads(data)
    text = reply["choices"][0]["text"] if status == 200 else None
    print(f"completion: {status} {text!r} (runtime.generate alone: {want!r})")
    if text != want or reply.get("usage") != {"prompt_tokens": len(PROMPT),
                                              "completion_tokens": 16,
                                              "total_tokens": len(PROMPT) + 16}:
        failures.append(f"completion: {status} {data[:300]!r}")
    status, data = post(port, dict(request, stream=True))
    events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
    streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    print(f"stream: {status}, {len(events)} events, joined {streamed!r}, last {events[-1]!r}")
    if status != 200 or streamed != want or events[-1] != "[DONE]":
        failures.append(f"stream: {status} {data[:300]!r}")
    status, data = post(port, dict(request, n=2))
    print(f"n=2: {status} {data.decode()}")
    if status != 400 or json.loads(data)["error"]["param"] != "n":
        failures.append(f"n=2: {status} {data[:300]!r}")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    import ray
    from ray import serve

    from onnx_light.serve import ray_app

    # The workers import onnx_light from this checkout, as the driver does.
    python_dir = sys.path[0]
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": python_dir}})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        serve.run(ray_app.app(demo=True, num_replicas=args.replicas), route_prefix="/")
        failures = check(args.port)
    finally:
        serve.shutdown()
        ray.shutdown()
    for failure in failures:
        print("FAILED", failure)
    print("ray_check:", "ok" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
