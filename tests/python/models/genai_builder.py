"""Decoders built by onnxruntime-genai's model builder (`python -m
onnxruntime_genai.models.builder -e cpu -p fp32|int4`, and "fp16-gqa": see _FP16_GQA) from
tiny random-weight Llama and Qwen2 checkpoints that transformers builds from a config and `save_pretrained`s (no download), with
a small BPE tokenizer trained in-process (the builder requires one). Outputs are cached under
build/models/genai, named by a hash of the config, the onnxruntime-genai/transformers versions
and this file, so a changed builder never reuses a stale model."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version

MODEL_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                          "build", "models", "genai"))

_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=256,
             rms_norm_eps=1e-6, tie_word_embeddings=True)
# "tiny" for the tests; the real shapes (SmolLM2-135M, Qwen2.5-0.5B: export_hf's configs)
# for perf/ (bench_genai_decode.py, check_genai_real_shapes.py), and their 2-layer versions
# with every real width ("smollm2_2l", "qwen05_2l") for the tests.
CONFIGS = {("llama", "tiny"): dict(_TINY), ("qwen2", "tiny"): dict(_TINY)}
REAL_SIZES = {"llama": ("smollm2", "smollm2_2l"), "qwen2": ("qwen05", "qwen05_2l")}


def _real_configs():
    from models import export_hf

    return {(arch, size): export_hf.CONFIGS[(arch, size)]
            for arch, sizes in REAL_SIZES.items() for size in sizes}


def _config(arch: str, size: str) -> dict:
    """CONFIGS, the real shapes, or export_hf's tiny configs of its other architectures
    (Mistral, Qwen3, Gemma, ...: tests/python/test_more_architectures.py)."""
    if (arch, size) in CONFIGS:
        return CONFIGS[(arch, size)]
    from models import export_hf

    if arch in export_hf.OTHER_ARCHS:
        return export_hf.CONFIGS[(arch, size)]
    return _real_configs()[(arch, size)]


def _key(arch: str, precision: str, size: str) -> str:
    with open(__file__, "rb") as f:
        source = f.read().decode()
    blob = json.dumps([arch, precision, size, _config(arch, size), version("onnxruntime-genai"),
                       version("transformers"), source], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _checkpoint(arch: str, size: str, out: str) -> None:
    """The random-weight checkpoint and tokenizer of docs/examples/random_checkpoint.py."""
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "examples")
    sys.path.insert(0, os.path.normpath(examples))
    try:
        from random_checkpoint import write_checkpoint
    finally:
        sys.path.pop(0)
    write_checkpoint(out, arch, _config(arch, size))


# The builder writes MultiHeadAttention + RotaryEmbedding for `-e cpu -p fp16`: its table of
# GroupQueryAttention configurations has no (cpu, FLOAT16), which onnxruntime's CPU kernel
# has (onnxruntime 1.32). "fp16-gqa" runs the builder with (cpu, FLOAT16) added to that table:
# the fp16 decoder with GroupQueryAttention and FLOAT16 caches, as its CUDA build has.
_FP16_GQA = """
import os, runpy, sys
import onnx_ir as ir
import onnxruntime_genai.models as models
sys.path.insert(0, os.path.dirname(models.__file__))
import builders.base as base
table = base.Model.is_gqa_supported
base.Model.is_gqa_supported = lambda self: table(self) or (self.ep, self.io_dtype) == (
    "cpu", ir.DataType.FLOAT16)
sys.argv = ["builder"] + sys.argv[1:]
runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
"""


def ensure(arch: str, precision: str, size: str = "tiny") -> str:
    """Path of the builder's model.onnx for (arch, fp32|int4|fp16-gqa, size), built if not
    cached."""
    out = os.path.join(MODEL_DIR, f"{size}_{arch}_{precision}-{_key(arch, precision, size)}")
    path = os.path.join(out, "model.onnx")
    if os.path.exists(path):
        return path
    checkpoint = out + ".hf"
    if not os.path.exists(os.path.join(checkpoint, "config.json")):
        _checkpoint(arch, size, checkpoint)
    tmp = out + f".tmp-{os.getpid()}"
    launcher = ["-c", _FP16_GQA] if precision == "fp16-gqa" else [
        "-m", "onnxruntime_genai.models.builder"]
    subprocess.run([sys.executable, *launcher, "-i", checkpoint, "-o", tmp,
                    "-p", precision.split("-")[0], "-e", "cpu"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.replace(tmp, out)
    shutil.rmtree(checkpoint)  # the float checkpoint (2 GB at Qwen2.5-0.5B's shape) is done
    return path
