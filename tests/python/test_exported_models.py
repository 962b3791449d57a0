"""Tiny Llama- and GPT-2-architecture decoders built with transformers from a config (random
weights, no download), exported with torch.onnx.export, run on onnx-light: logits match
onnxruntime's on the same inputs within 1e-4."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

MODEL_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "build", "models")


@pytest.fixture(scope="module")
def exported():
    paths = {name: os.path.join(MODEL_DIR, f"tiny_{name}.onnx") for name in ("llama", "gpt2")}
    if not all(os.path.exists(p) for p in paths.values()):
        export_hf.main(MODEL_DIR)
    return paths


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (2, 5)])
def test_exported_decoder_logits_match_onnxruntime(exported, arch, shape):
    path = exported[arch]
    rng = np.random.default_rng(sum(shape))
    ids = rng.integers(0, 128, size=shape, dtype=np.int64)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0]
    model = ol_onnx.load_model(path)  # external weights are memory-mapped
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    session = runtime.RuntimeSession(model)
    logits = np.from_dlpack(session.run(context, {"input_ids": ids})["logits"])
    assert logits.shape == expected.shape
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)
