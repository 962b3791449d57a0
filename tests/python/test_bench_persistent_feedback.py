"""perf/bench_persistent_feedback.py: the JSON document it writes and the invariants it
checks at every step (not its timings)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "perf", "bench_persistent_feedback.py")
COUNTERS = ("storage_allocations", "storage_allocated_bytes", "storage_prefix_copied_bytes",
            "storage_append_copied_bytes", "storage_reuse_count")


def run_bench(tmp_path, *args):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--out", str(out), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    return proc, out


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    proc, out = run_bench(tmp_path_factory.mktemp("bench"), "--tokens", "4")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == document  # stdout and --out agree
    return document


def test_records_revisions_model_identity_and_policy(result):
    assert result["benchmark"] == "persistent_feedback"
    revisions = result["revisions"]
    if os.path.exists(os.path.join(REPO, ".git")):  # a checkout (not an unpacked archive)
        assert re.fullmatch(r"[0-9a-f]{40}", revisions["source"])
        assert re.fullmatch(r"[0-9a-f]{40}", revisions["target"])
        assert revisions["target_ref"] in ("main", "origin/main")
    else:
        assert revisions["source"] is None
    model = result["model"]
    assert model["nodes"] == ["Attention"]
    assert model["opset_import"] == {"": 23}
    assert model["persistent_bindings"] == [["past_key", "present_key"],
                                            ["past_value", "present_value"]]
    assert re.fullmatch(r"[0-9a-f]{64}", model["sha256"]) and model["serialized_bytes"] > 0
    policy = result["execution_policy"]
    assert policy["persistent_tensor_initial_capacity"] == 32
    assert policy["events_enabled"] is True
    assert policy["stateless_feedback"] == "model.graph.persistent_bindings"
    assert set(result["setup_ns"]) == {"stateful", "stateless_session"}
    assert all(isinstance(v, int) and v > 0 for v in result["setup_ns"].values())


def test_each_token_has_raw_times_logical_bytes_and_counters(result):
    steps = result["steps"]
    assert [s["token"] for s in steps] == [1, 2, 3, 4]
    head_size = result["fixture"]["head_size"]
    for s in steps:
        assert isinstance(s["stateful_ns"], int) and s["stateful_ns"] > 0
        assert isinstance(s["stateless_ns"], int) and s["stateless_ns"] > 0
        # Visible K and V lengths only: token * (Dk + Dv) floats, never reserved capacity.
        assert s["retained_logical_bytes"] == s["token"] * 4 * 2 * head_size
        assert isinstance(s["event_workspace_peak_bytes"], int)
        for c in COUNTERS:
            assert isinstance(s[c], int) and s[c] >= 0
            assert isinstance(s["stateless_storage"][c], int)
        checks = s["checks"]
        assert checks["retained_pointer_identity"] is True
        assert checks["y_max_abs_error_vs_numpy"] <= result["fixture"]["tolerance"]
        assert checks["max_abs_diff_state_vs_stateless"] <= result["fixture"]["tolerance"]


def test_a_violated_check_fails_loudly(tmp_path):
    # A negative tolerance cannot be met: the first numerical check must stop the run.
    proc, out = run_bench(tmp_path, "--tokens", "2", "--tolerance", "-1")
    assert proc.returncode == 1
    assert "CHECK FAILED: token 1: y differs from the NumPy reference" in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_runs_from_the_repository_root_with_pythonpath_dot(tmp_path):
    env = dict(os.environ)
    built = os.path.join(REPO, "python", "onnx_light", "onnx_py")
    if not any(f.startswith("_onnxpykernels") for f in os.listdir(built)):
        pytest.fail("the extension module is not built into python/onnx_light/onnx_py")
    env["PYTHONPATH"] = "."
    proc = subprocess.run([sys.executable, "perf/bench_persistent_feedback.py", "--tokens", "1"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["steps"][0]["retained_logical_bytes"] == 16


def counters(step):
    return tuple(step[c] for c in COUNTERS)


def test_kernel_counters_follow_the_spec_byte_formulas(result):
    # One FLOAT token with Dk = Dv = 2 copies 4 * (Dk + Dv) = 16 bytes.
    row = 4 * 2 * result["fixture"]["head_size"]
    capacity = result["execution_policy"]["persistent_tensor_initial_capacity"]
    first, *rest = result["steps"]
    # The state: token 1 allocates K and V with capacity for 32 tokens (the empty initial
    # arrays are borrowed, never written); later tokens reuse both, copying no prefix.
    assert counters(first) == (2, capacity * row, 0, row, 0)
    for step in rest:
        assert counters(step) == (0, 0, 0, row, 2)
    # The stateless session has no capacity: two dense results, the whole prefix copied.
    for step in result["steps"]:
        t = step["token"]
        assert counters(step["stateless_storage"]) == (2, t * row, (t - 1) * row, row, 0)
