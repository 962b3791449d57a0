"""perf/bench_batching.py --quick runs and writes the JSON the issue asks for: the fields, the
curve, batched mode, and every request's tokens identical to runtime.generate alone (no
timing is asserted)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_batching_quick_json(tmp_path):
    out = tmp_path / "batching.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    subprocess.run([sys.executable, os.path.join(REPO, "perf", "bench_batching.py"), "--quick",
                    "--json", str(out)], check=True, env=env, cwd=REPO, timeout=600)
    result = json.loads(out.read_text())
    for key in ("requests", "sequential_tokens_per_s", "concurrent_tokens_per_s",
                "identical_tokens", "ttft_ms_p50", "decode_gap_ms_p99",
                "cold_concurrent_tokens_per_s", "cold_decode_gap_ms_p99"):
        assert key in result, key
    assert result["requests"] == 8
    assert result["identical_tokens"] is True
    assert result["mode"] == "batched"
    # How many rows share a step depends on how fast the submissions arrive: the batch sizes
    # are checked deterministically in test_scheduler.py.
    assert 1 <= result["max_batch_size"] <= 8
    assert result["sequential_tokens_per_s"] > 0 and result["concurrent_tokens_per_s"] > 0
    assert [row["concurrent"] for row in result["curve"]] == [1, 2, 4, 8, 16]
    for row in result["curve"]:
        assert row["identical_tokens"] is True
        assert 1 <= row["max_batch_size"] <= row["concurrent"]
    join = result["long_prompt_join"]
    assert join["long_prompt_tokens"] == 64 and join["decoding"] == 4
    for key, chunk in (("chunk_0", 0), ("chunk_16", 16)):
        assert join[key]["prefill_chunk"] == chunk
        assert join[key]["decode_gap_ms_max"] > 0 and join[key]["long_prompt_ttft_ms"] > 0
    # perf/plot_batching.py draws the curve: a point per row, titled with its ratio.
    svg = tmp_path / "curve.svg"
    subprocess.run([sys.executable, os.path.join(REPO, "perf", "plot_batching.py"), str(out),
                    "--out", str(svg)], check=True, cwd=REPO, timeout=60)
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<circle") == 5
    for row in result["curve"]:
        assert f"<title>{row['concurrent']}: {row['ratio_to_sequential']:.2f}x</title>" in text


def test_bench_batching_on_an_int4_genai_build(tmp_path):
    """--genai: the same run on onnxruntime-genai's builder's int4 build (2 layers of the
    SmolLM2-135M shape), prepared with paged row caches; batched, tokens identical."""
    out = tmp_path / "batching_int4.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    subprocess.run([sys.executable, os.path.join(REPO, "perf", "bench_batching.py"), "--quick",
                    "--genai", "llama:smollm2_2l:int4", "--sections", "main", "--json",
                    str(out)], check=True, env=env, cwd=REPO, timeout=900)
    result = json.loads(out.read_text())
    assert result["model"] == "llama:smollm2_2l:int4" and result["layers"] == 2
    assert result["mode"] == "batched" and result["identical_tokens"] is True
    assert result["concurrent_tokens_per_s"] > 0
