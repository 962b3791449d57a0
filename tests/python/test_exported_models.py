"""Tiny Llama- and GPT-2-architecture decoders built with transformers from a config (random
weights, no download), exported with torch.onnx.export, run on onnx-light: logits match
onnxruntime's on the same inputs within 1e-4."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime


@pytest.fixture(scope="module")
def exported():
    return {name: export_hf.ensure(name) for name in ("llama", "gpt2")}


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


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_cache_export_outputs_match_onnxruntime_on_a_left_padded_prompt_and_a_step(arch):
    """The KV-cache export on a left-padded batch 2 prompt from empty caches, then one more
    token on the returned caches: logits and every present.N.* within 1e-4 of onnxruntime's."""
    path = export_hf.ensure(arch, with_cache=True)
    ids = np.array([[5, 6, 7, 8, 9], [0, 0, 3, 4, 5]], np.int64)
    mask = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], np.int64)
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
    reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in reference.get_outputs()]
    session = runtime.RuntimeSession(ol_onnx.load_model(path))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
             **export_hf.empty_cache(arch, 2)}
    for _ in range(2):
        expected = dict(zip(names, reference.run(None, feeds)))
        got = session.run(context, feeds)
        for name in names:
            value = np.from_dlpack(got[name])
            assert value.shape == expected[name].shape, name
            np.testing.assert_allclose(value, expected[name], rtol=0, atol=1e-4, err_msg=name)
        feeds = {"input_ids": np.array([[11], [12]], np.int64),
                 "attention_mask": np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1),
                 "position_ids": positions[:, -1:] + 1,
                 **{past: expected[present] for past, present in
                    export_hf.cache_names(export_hf.cache_shape(arch)[0])}}


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_every_cache_input_of_the_export_has_exactly_one_use(arch):
    """A persistent binding needs its input used once: export_hf rewrites the exporter's
    Shape(past_key_values.N.*) reads, leaving only the Concat that builds present.N.*."""
    model = ol_onnx.load_model(export_hf.ensure(arch, with_cache=True))
    for past, present in export_hf.cache_names(export_hf.cache_shape(arch)[0]):
        users = [n for n in model.graph.node if past in list(n.input)]
        assert [(n.op_type, list(n.output)) for n in users] == [("Concat", [present])], past
