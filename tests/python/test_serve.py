"""The OpenAI-compatible server (onnx_light.serve, `python -m onnx_light serve`), in-process on
127.0.0.1 port 0: through the `openai` client, greedy completions and chat completions
(whole and streamed) are exactly the text runtime.generate's tokens decode to, usage counts
are exact, stop strings and EOS end the text with finish_reason "stop", a seed repeats a
sampled completion. Through plain sockets: every bad request is an OpenAI error object with
the right status (400, 404, 405, 413, 429), never a traceback; a client that disconnects
mid-stream cancels its scheduler request and the server goes on serving.

Holding requests without timing: the "gated" server's model calls a Python kernel
(py.Gate) after its logits, which lets a call through only when the test gives it a permit,
so the test decides exactly how many tokens exist when it disconnects or fills the queue.
"""
from __future__ import annotations

import http.client
import importlib
import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import onnx_light.aio as aio
from onnx_light import demo
from onnx_light import onnx as ol_onnx
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.serve import DEMO_NAME, OpenAIApp, ServerThread, build_app, demo_app
from onnx_light.serve.http import Limits
from onnx_light.text import ModelSettings, TextGenerator, empty_caches
from test_text import PROMPT, files  # noqa: F401 - `files`: the BPE tokenizer + tiny Llama

openai = pytest.importorskip("openai")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANG_GUARD_S = 120  # only ever reached if something hangs
TEMPLATE = "{% for m in messages %}<s>{{ m['content'] }}{% endfor %}"


# ---------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def model_dir(files, tmp_path_factory):  # noqa: F811 - the imported fixture
    """test_text's model and tokenizer, plus a chat template."""
    out = tmp_path_factory.mktemp("serve")
    for name in os.listdir(files):
        os.symlink(os.path.realpath(files / name), out / name)
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return out


@pytest.fixture(scope="module")
def bpe_server(model_dir):
    app = OpenAIApp(TextGenerator(str(model_dir / "model.onnx"), str(model_dir)), "tiny-llama")
    with ServerThread(app, port=0) as server:
        yield server


@pytest.fixture(scope="module")
def demo_server():
    with ServerThread(demo_app(max_in_flight=2, max_queue=4), port=0) as server:
        yield server


def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0,
                         timeout=HANG_GUARD_S)


def greedy(generator, ids, max_new_tokens, **sampling):
    """The completion runtime.generate gives alone: (text, tokens)."""
    options = runtime.GenerationOptions(max_new_tokens=max_new_tokens, **sampling)
    feeds = {"input_ids": np.asarray([ids], np.int64), **empty_caches(generator.model)}
    out = np.from_dlpack(runtime.generate(generator.model, generator.context, feeds, options))
    tokens = out[0, len(ids):].tolist()
    return generator.tokenizer.decode(tokens), tokens


# ---------------------------------------------------------------------------- completions

def test_a_greedy_completion_is_the_text_of_generates_tokens_with_exact_usage(bpe_server):
    gen = bpe_server.app.generator
    ids = gen.prompt_ids(PROMPT)
    want, _ = greedy(gen, ids, 8)
    reply = client(bpe_server).completions.create(model="tiny-llama", prompt=PROMPT,
                                                   max_tokens=8, temperature=0)
    assert reply.object == "text_completion" and reply.model == "tiny-llama"
    assert [c.text for c in reply.choices] == [want]
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens,
            reply.usage.total_tokens) == (len(ids), 8, len(ids) + 8)


def test_a_streamed_completion_joins_to_the_same_text_and_ends_with_usage(bpe_server):
    gen = bpe_server.app.generator
    ids = gen.prompt_ids(PROMPT)
    want, _ = greedy(gen, ids, 8)
    chunks = list(client(bpe_server).completions.create(
        model="tiny-llama", prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == want
    assert len([t for t in texts if t]) >= 2  # token by token, not all at the end
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == len(ids)


def test_token_id_prompts_are_used_as_given(bpe_server):
    gen = bpe_server.app.generator
    ids = gen.prompt_ids(PROMPT)
    want, _ = greedy(gen, ids, 5)
    reply = client(bpe_server).completions.create(model="tiny-llama", prompt=ids,
                                                   max_tokens=5, temperature=0)
    assert reply.choices[0].text == want and reply.usage.prompt_tokens == len(ids)


def test_a_stop_string_ends_the_text_before_it(bpe_server):
    gen = bpe_server.app.generator
    want, _ = greedy(gen, gen.prompt_ids(PROMPT), 8)
    stop = want.strip()[2:4]
    assert len(stop) == 2
    api = client(bpe_server)
    reply = api.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=8,
                                   temperature=0, stop=[stop, "never appears"])
    assert reply.choices[0].text == want[:want.find(stop)]
    assert reply.choices[0].finish_reason == "stop"
    streamed = list(api.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=8,
                                           temperature=0, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == want[:want.find(stop)]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_eos_from_generation_config_ends_the_completion_uncounted(model_dir, tmp_path):
    gen = TextGenerator(str(model_dir / "model.onnx"), str(model_dir))
    ids = gen.prompt_ids(PROMPT)
    _, tokens = greedy(gen, ids, 8)
    for name in os.listdir(model_dir):
        os.symlink(os.path.realpath(model_dir / name), tmp_path / name)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": tokens[2]}))
    app = OpenAIApp(TextGenerator(str(tmp_path / "model.onnx"), str(tmp_path)), "eos")
    with ServerThread(app) as server:
        reply = client(server).completions.create(model="eos", prompt=PROMPT, max_tokens=8,
                                                   temperature=0)
    assert reply.choices[0].text == gen.tokenizer.decode(tokens[:2])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 2


def test_a_seed_repeats_a_sampled_completion_as_generate_samples_it(bpe_server):
    gen = bpe_server.app.generator
    ids = gen.prompt_ids(PROMPT)
    api = client(bpe_server)
    sampled = [api.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=12,
                                      temperature=1.5, top_p=0.95, seed=seed).choices[0].text
               for seed in (7, 7, 8)]
    want, _ = greedy(gen, ids, 12, temperature=1.5, top_p=0.95, seed=7)
    assert sampled[0] == sampled[1] == want
    assert sampled[2] == greedy(gen, ids, 12, temperature=1.5, top_p=0.95, seed=8)[0]


# ---------------------------------------------------------------------------- chat

def test_a_chat_completion_applies_the_template_whole_and_streamed(bpe_server):
    gen = bpe_server.app.generator
    messages = [{"role": "user", "content": PROMPT}]
    ids = gen.prompt_ids(messages, chat=True)
    assert ids == gen.tokenizer.encode("<s>" + PROMPT, add_special_tokens=False).ids
    want, _ = greedy(gen, ids, 6)
    api = client(bpe_server)
    reply = api.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=6,
                                        temperature=0)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == want
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(ids), 6)
    chunks = list(api.chat.completions.create(model="tiny-llama", messages=messages,
                                              max_completion_tokens=6, temperature=0,
                                              stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "length"


def test_build_app_names_the_model_after_its_file(model_dir):
    app = build_app(str(model_dir / "model.onnx"), str(model_dir / "tokenizer.json"))
    assert app.model_name == "model" and app.generator.settings.chat_template == TEMPLATE
    with ServerThread(app) as server:
        status, _, listing = request(server, "GET", "/v1/models")
        assert status == 200 and [m["id"] for m in listing["data"]] == ["model"]
        assert request(server, "GET", "/v1/models/model")[2]["object"] == "model"


def test_the_demo_serves_the_tiny_decoder_with_characters(demo_server):
    api = client(demo_server)
    assert [m.id for m in api.models.list().data] == [DEMO_NAME]
    prompt = "onnx-light generates "
    gen = demo_server.app.generator
    want, _ = greedy(gen, demo.encode(prompt), 20)
    reply = api.completions.create(model=DEMO_NAME, prompt=prompt, max_tokens=20,
                                   temperature=0)
    assert reply.choices[0].text == want
    chat = api.chat.completions.create(model=DEMO_NAME, temperature=0, max_tokens=10,
                                       messages=[{"role": "user", "content": "hi"}])
    chat_ids = demo.encode("user: hi assistant: ")
    assert chat.choices[0].message.content == greedy(gen, chat_ids, 10)[0]
    assert chat.usage.prompt_tokens == len(chat_ids)


# ---------------------------------------------------------------------------- errors

def request(server, method, path, body=None, headers=None):
    """(status, headers, parsed JSON) over http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=HANG_GUARD_S)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def assert_error(reply, status, param=None, code=None, kind="invalid_request_error"):
    got_status, _, body = reply
    assert got_status == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == kind and body["error"]["param"] == param
    if code is not None:
        assert body["error"]["code"] == code
    assert "Traceback" not in body["error"]["message"]
    return body["error"]["message"]


@pytest.mark.parametrize("body, param, code, words", [
    (b"{not json", None, "invalid_json", "not valid JSON"),
    (b"\xff\xfe", None, "invalid_json", "not valid JSON"),
    ([1, 2], None, "invalid_json", "JSON object"),
    ({"prompt": "hi", "n": 2}, "n", "unsupported_value", "'n' must be 1"),
    ({"prompt": "hi", "max_tokens": -3}, "max_tokens", "invalid_value", "at least 1"),
    ({"prompt": "hi", "max_tokens": "ten"}, "max_tokens", "invalid_type", "an integer"),
    ({"prompt": "hi", "temperature": True}, "temperature", "invalid_type", "a number"),
    ({"prompt": "hi", "top_p": 0}, "top_p", "invalid_value", "(0, 1]"),
    ({"prompt": "hi", "seed": 2**64}, "seed", "invalid_value", "seed"),
    ({"prompt": "hi", "stream": "yes"}, "stream", "invalid_type", "a boolean"),
    ({"prompt": "hi", "stop": ["a", 3]}, "stop", "invalid_type", "strings"),
    ({"prompt": "hi", "stop": list("abcde")}, "stop", "invalid_value", "at most 4"),
    ({"prompt": "hi", "model": "gpt-9"}, "model", "model_not_found", "'gpt-9' does not"),
    ({"prompt": "hi", "logprobs": 3}, "logprobs", "unsupported_parameter", "not supported"),
    ({"prompt": 12}, "prompt", "invalid_type", "string or an array"),
    ({}, "prompt", "missing_required_parameter", "required"),
    ({"prompt": "caf\u00e9"}, "prompt", "invalid_value", "printable ASCII"),
    ({"prompt": [5, 95]}, "prompt", "invalid_value", "vocabulary of 95"),
    ({"prompt": "x" * 500, "max_tokens": 20}, "max_tokens", "context_length_exceeded", "512"),
    ({"prompt": "x" * 512}, "prompt", "context_length_exceeded", "512"),
])
def test_bad_completion_requests_are_400_error_objects(demo_server, body, param, code, words):
    message = assert_error(request(demo_server, "POST", "/v1/completions", body), 400, param,
                           code)
    assert words in message


@pytest.mark.parametrize("body, words", [
    ({"messages": []}, "non-empty array"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": 1, "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text parts"),
])
def test_bad_chat_messages_are_400_error_objects(demo_server, body, words):
    message = assert_error(request(demo_server, "POST", "/v1/chat/completions", body), 400,
                           "messages")
    assert words in message


def test_unknown_paths_are_404_and_wrong_methods_405(demo_server):
    assert_error(request(demo_server, "POST", "/v1/embeddings", {}), 404, code="unknown_url")
    status, headers, body = request(demo_server, "GET", "/v1/completions")
    assert_error((status, headers, body), 405, code="method_not_allowed")
    assert headers["Allow"] == "POST"
    status, _, health = request(demo_server, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["model"] == DEMO_NAME


def raw_exchange(server, data: bytes) -> bytes:
    """Sends bytes, half-closes nothing, reads until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_S) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_malformed_http_is_answered_with_an_error_object_and_closed(demo_server):
    for data, status in [(b"NONSENSE\r\n\r\n", 400), (b"GET / HTTP/2.0\r\n\r\n", 505),
                         (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
                          413),
                         (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                          501),
                         (b"GET /health HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n", 431)]:
        reply = raw_exchange(demo_server, data)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d " % status), reply[:200]
        assert b"Connection: close" in head
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}


def test_keep_alive_and_pipelined_requests_are_answered_in_order(demo_server):
    one = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s")
    bodies = [json.dumps({"prompt": p, "max_tokens": 3, "temperature": 0}).encode()
              for p in ("abc", "xyz")]
    data = b"".join(one % (len(b), b) for b in bodies)
    data += b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
    replies = raw_exchange(demo_server, data).split(b"HTTP/1.1 ")[1:]
    assert [r[:3] for r in replies] == [b"200"] * 3
    gen = demo_server.app.generator
    for reply, prompt in zip(replies[:2], ("abc", "xyz")):
        text = json.loads(reply.partition(b"\r\n\r\n")[2])["choices"][0]["text"]
        assert text == greedy(gen, demo.encode(prompt), 3)[0]


# ---------------------------------------------------------------------------- held requests

class Gate:
    """py.Gate: each model call waits for a permit (or for the gate to open)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.permits, self.calls, self.opened = 0, 0, False

    def kernel(self, ctx, inputs):
        with self.cond:
            self.calls += 1
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: self.opened or self.permits, HANG_GUARD_S)
            if not self.opened:
                self.permits -= 1
        return [np.array(np.from_dlpack(inputs[0]))]

    def allow(self, n=1):
        with self.cond:
            self.permits += n
            self.cond.notify_all()

    def open(self):
        with self.cond:
            self.opened = True
            self.cond.notify_all()

    def wait_calls(self, n):
        with self.cond:
            assert self.cond.wait_for(lambda: self.calls >= n, HANG_GUARD_S)


class WatchedScheduler:
    """The app's scheduler, telling the test when a request's cancel() is called."""

    def __init__(self, scheduler):
        self._scheduler, self.cancel_called = scheduler, threading.Event()

    def submit(self, *args, **kwargs):
        return WatchedHandle(self._scheduler.submit(*args, **kwargs), self.cancel_called)

    def stream(self, *args, **kwargs):
        return aio.scheduler_stream(self, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._scheduler, name)


class WatchedHandle:
    def __init__(self, handle, event):
        self._handle, self._event = handle, event

    def cancel(self, reason="cancelled"):
        self._handle.cancel(reason)
        self._event.set()

    def __getattr__(self, name):
        return getattr(self._handle, name)


@pytest.fixture()
def gated():
    """A server whose model calls pass one per Gate permit: the demo decoder with py.Gate
    between its logits and the graph output; 1 request in flight, 1 queued."""
    config = TinyDecoderConfig()
    model = build_tiny_decoder(config=config)
    for node in model.graph.node:
        node.output[:] = ["raw_logits" if o == "logits" else o for o in node.output]
    model.graph.node.add(op_type="Gate", domain="py", input=["raw_logits"], output=["logits"])
    model.opset_import.add(domain="py", version=1)
    generator = TextGenerator.from_objects(model, demo.CharTokenizer(),
                                           ModelSettings(context_length=config.max_positions))
    gate = Gate()
    generator.context.register_kernel("py", "Gate", gate.kernel)
    app = OpenAIApp(generator, "gated", max_in_flight=1, max_queue=1)
    app.scheduler = WatchedScheduler(app.scheduler)
    server = ServerThread(app).start()
    try:
        yield server, gate
    finally:
        gate.open()
        server.close()


def sse_request(port, body) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


def read_events(s, n, buffered=b""):
    """Reads until n `data:` events arrived; returns (their JSON, the rest)."""
    while buffered.count(b"data: ") < n:
        chunk = s.recv(65536)
        assert chunk, "the server closed the stream early"
        buffered += chunk
    events = [line[6:] for line in buffered.split(b"\n") if line.startswith(b"data: ")]
    return [e.decode() if e == b"[DONE]" else json.loads(e) for e in events[:n]], buffered


def test_a_client_disconnect_cancels_its_request_and_the_server_goes_on(gated):
    server, gate = gated
    k = 3
    s = sse_request(server.port, {"prompt": "abc", "max_tokens": 50, "temperature": 0,
                                  "stream": True})
    gate.allow(k)
    events, _ = read_events(s, k)
    assert "".join(e["choices"][0]["text"] for e in events) == \
        greedy(demo.text_generator(), demo.encode("abc"), k)[0]
    gate.wait_calls(k + 1)  # call k+1 waits in the gate: the request is mid-generation
    s.close()
    assert server.app.scheduler.cancel_called.wait(HANG_GUARD_S)
    gate.open()
    assert server.app.stats.wait_for(lambda c: c["disconnected"] == 1 and c["active"] == 0,
                                     HANG_GUARD_S)
    # The call running when cancel() came finishes and publishes; no call follows it.
    stats = server.app.stats.recent[-1]
    assert stats["cancelled"] and stats["tokens"] == k + 1 and gate.calls == k + 1
    counts = server.app.stats.snapshot()
    assert counts["cancelled"] == 1 and counts["accepted"] == 1
    # The server goes on serving.
    reply = client(server).completions.create(model="gated", prompt="abc", max_tokens=5,
                                              temperature=0)
    assert reply.choices[0].text == greedy(demo.text_generator(), demo.encode("abc"), 5)[0]


def test_a_full_queue_is_429_until_a_slot_frees(gated):
    server, gate = gated
    body = {"prompt": "abc", "max_tokens": 2, "temperature": 0, "stream": True}
    running = sse_request(server.port, body)
    gate.wait_calls(1)  # the first request's first call waits in the gate
    queued = sse_request(server.port, body)
    assert server.app.stats.wait_for(lambda c: c["active"] == 2, HANG_GUARD_S)
    status, headers, error = request(server, "POST", "/v1/completions", body)
    assert_error((status, headers, error), 429, code="queue_full", kind="rate_limit_error")
    assert headers["Retry-After"] == "1"
    assert server.app.stats.snapshot()["rejected"] == 1
    gate.open()
    for s in (running, queued):
        events, _ = read_events(s, 4)  # 2 texts, the finish reason, [DONE]
        assert events[2]["choices"][0]["finish_reason"] == "length" and events[3] == "[DONE]"
        s.close()
    assert server.app.stats.wait_for(lambda c: c["active"] == 0, HANG_GUARD_S)
    assert request(server, "POST", "/v1/completions", dict(body, stream=False))[0] == 200


# ---------------------------------------------------------------------------- the command

def test_the_kv_budget_options_reach_the_scheduler():
    import argparse

    from onnx_light.serve import _app_from_args, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--demo", "--max-kv-tokens", "300",
                              "--kv-admission", "grow_and_preempt"])
    app = _app_from_args(args)
    assert app.scheduler.max_kv_tokens == 300
    assert app.scheduler.kv_admission == "grow_and_preempt"
    with ServerThread(app, port=0) as server:
        status, _, reply = request(server, "POST", "/v1/completions",
                                   {"prompt": "abc", "max_tokens": 4, "temperature": 0})
        assert status == 200
        assert reply["choices"][0]["text"] == greedy(demo.text_generator(),
                                                     demo.encode("abc"), 4)[0]
    with pytest.raises(SystemExit):
        parser.parse_args(["--demo", "--kv-admission", "lazy"])


def test_the_command_serves_the_demo_and_stops_on_sigterm():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "onnx_light", "serve", "--demo", "--port",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        assert f"model '{DEMO_NAME}' at http://127.0.0.1:" in line, proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        server = type("Addr", (), {"port": port})
        status, _, reply = request(server, "POST", "/v1/completions",
                                   {"prompt": "abc", "max_tokens": 4, "temperature": 0})
        assert status == 200
        assert reply["choices"][0]["text"] == greedy(demo.text_generator(),
                                                     demo.encode("abc"), 4)[0]
        proc.terminate()
        assert proc.wait(HANG_GUARD_S) == 0
        # Warmed up before listening: the first request paid no compile and no packing.
        assert proc.stderr.read().startswith(
            "onnx-light serve: compiled the model and packed its weights in ")
    finally:
        proc.kill()
        proc.wait()
    bad = subprocess.run([sys.executable, "-m", "onnx_light", "serve"], capture_output=True,
                         text=True, env=env, timeout=HANG_GUARD_S)
    assert bad.returncode == 1 and "give MODEL and --tokenizer, or --demo" in bad.stderr


def test_the_ray_module_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    monkeypatch.delitem(sys.modules, "onnx_light.serve.ray_app", raising=False)
    with pytest.raises(ImportError, match='needs Ray Serve.*pip install "ray\\[serve\\]"'):
        importlib.import_module("onnx_light.serve.ray_app")
