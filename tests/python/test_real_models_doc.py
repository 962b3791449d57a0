"""docs/real-models.md runs as written: its shell blocks, in order, in a temporary $OUT (the
2-layer SmolLM2-shaped random checkpoint, the genai builder's int4 export, prepare, generate,
the paged-rows rewrite, and the fp32 build quantized by onnxruntime's quantize_dynamic)."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "real-models.md"


def test_every_shell_block_of_the_real_model_walkthrough_runs(tmp_path):
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 6
    env = dict(os.environ, OUT=str(tmp_path))
    outputs = []
    for block in blocks:
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"{block}\n{run.stdout}\n{run.stderr}"
        outputs.append(run.stdout + run.stderr)
    assert "wrote a random-weight smollm2 checkpoint (llama, 2 layers)" in outputs[0]
    assert (tmp_path / "int4" / "genai_config.json").is_file()
    assert "bound 4 past/present pairs" in outputs[2]
    assert "past_key_values.1.value <- present.1.value" in outputs[2]
    # The cache's symbolic head width came from genai_config.json: the run went through.
    stats = re.search(r"\[5 prompt tokens, prefill [\d.]+ ms, (\d+) new tokens", outputs[3])
    assert stats, outputs[3]
    assert 1 <= int(stats.group(1)) <= 16
    # Step 5: the paged-rows rewrite of the same build, checked by logits, generates.
    assert "PagedAttention 'past_key_values.0/paged_attention'" in outputs[4]
    assert "logits equal onnx-light's on the original" in outputs[4]
    assert re.search(r"\[5 prompt tokens, prefill [\d.]+ ms, \d+ new tokens", outputs[4])
    # Step 6: the dynamically quantized fp32 build prepares and generates.
    assert "bound 4 past/present pairs" in outputs[5]
    assert re.search(r"\[5 prompt tokens, prefill [\d.]+ ms, \d+ new tokens", outputs[5])
