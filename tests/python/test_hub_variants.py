"""The variants the Hub's ONNX repositories ship beside model.onnx, each made by onnxruntime's
own tools from a TorchScript export (what Optimum writes): model_fp16 (convert_float_to_float16:
every tensor FLOAT16, the caches too), model_q4 (MatMulNBitsQuantizer: int4 MatMulNBits,
block 32) and model_q4f16 (both). Each, prepared with `prepare_decoder(bind="auto")`, gives
onnxruntime's greedy tokens on the same file; FLOAT16 MatMul (read as 16 bits, never packed
as FLOAT) matches a float64 reference and onnxruntime."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import export_hf
from onnx import TensorProto, helper, numpy_helper

from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

PROMPT = [3, 44, 18, 91, 27, 60, 2, 77]  # no near-tie on any of the variants
NEW_TOKENS = 8


def converted(src: str, kind: str, out: str) -> str:
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    model = onnx.load(src)
    if kind in ("fp16", "q4f16"):
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(model, keep_io_types=False)
    if kind in ("q4", "q4f16"):
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
        quantizer.process()
        model = quantizer.model.model
    onnx.save(model, out)
    return out


def onnxruntime_greedy(path: str, arch: str, dtype) -> list[int]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    layers, kv, head = export_hf.cache_shape(arch)
    pairs = export_hf.cache_names(layers)
    cache = {p: np.zeros((1, kv, 0, head), dtype) for p, _ in pairs}
    tokens, step, start = list(PROMPT), list(PROMPT), 0
    for _ in range(NEW_TOKENS):
        total = start + len(step)
        out = dict(zip(names, session.run(None, {
            "input_ids": np.array([step], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None], **cache})))
        last = out["logits"][0, -1].astype(np.float32)
        top2 = np.sort(last)[-2:]
        # Closer than 8 of the logits' own ulps (FLOAT16: 2^-10 relative) is a tie either
        # engine may break.
        ulp = float(np.spacing(dtype(top2[1])))
        assert top2[1] - top2[0] >= max(8 * ulp, 1e-4), "near-tie: choose another prompt"
        tokens.append(int(last.argmax()))
        step, start = [tokens[-1]], total
        cache = {p: out[q] for p, q in pairs}
    return tokens


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("kind", ["fp16", "q4", "q4f16"])
def test_a_hub_variant_generates_onnxruntimes_tokens(tmp_path, arch, kind):
    src = export_hf.ensure(arch, with_cache=True, raw=True, exporter="torchscript")
    path = converted(src, kind, str(tmp_path / f"model_{kind}.onnx"))
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert ("MatMulNBits" in ops) == kind.startswith("q4")
    dtype = np.float16 if kind.endswith("16") else np.float32
    expected = onnxruntime_greedy(path, arch, dtype)
    prepared = tmp_path / "prepared.onnx"
    prepare.prepare_decoder(path, prepared, bind="auto")
    layers, kv, head = export_hf.cache_shape(arch)
    feeds = {"input_ids": np.array([PROMPT], np.int64),
             **{p: np.zeros((1, kv, 0, head), dtype) for p, _ in export_hf.cache_names(layers)}}
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(17)))
    tokens = np.from_dlpack(runtime.generate(ol_onnx.load_model(str(prepared)), context, feeds,
                                             runtime.GenerationOptions(max_new_tokens=NEW_TOKENS)))
    assert tokens[0].tolist() == expected


def float16_matmul(k: int, n: int, weight: np.ndarray | None):
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT16, None)]
    initializers = []
    if weight is None:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT16, [k, n]))
    else:
        initializers.append(numpy_helper.from_array(weight, "W"))
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], "g", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, None)],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("m,k,n", [(1, 576, 1536), (3, 96, 37), (4, 200, 130), (5, 33, 64),
                                   (128, 256, 300)])
@pytest.mark.parametrize("constant", [True, False], ids=["initializer", "graph_input"])
def test_float16_matmul_matches_the_reference_and_onnxruntime(m, k, n, constant):
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    model = float16_matmul(k, n, w if constant else None)
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = None
    for call in range(3):  # the second call of a constant weight builds its 16-bit panels
        a = rng.standard_normal((m, k)).astype(np.float16) if first is None else first[0]
        feeds = {"A": a} if constant else {"A": a, "W": w}
        got = np.from_dlpack(session.run(context, feeds)["Y"]).copy()
        assert got.dtype == np.float16 and got.shape == (m, n)
        if first is None:
            first = (a, got)
        else:  # the same bits from the row-major weight and from its panels
            np.testing.assert_array_equal(got, first[1])
        reference = a.astype(np.float64) @ w.astype(np.float64)
        # FLOAT sums (error ~1e-7), then one rounding to FLOAT16 (half an ulp: 2^-11 relative).
        assert np.all(np.abs(got - reference) <= 2.0 ** -11 * np.abs(reference) + 1e-6)
        np.testing.assert_allclose(got.astype(np.float32), theirs.run(None, feeds)[0],
                                   rtol=4e-3, atol=4e-3 * np.abs(reference).max())


def test_a_float16_models_norms_and_attention_run_fused(tmp_path):
    """convert_float_to_float16 makes the norms' constants (the square's 2, eps) and the
    attention's scales FLOAT16: the plan still fuses each norm into one RMSNormalization and
    each layer's attention into one ScaledDotProductAttention (computed in FLOAT, rounded
    once), and no ReduceMean or Softmax is left."""
    src = export_hf.ensure("llama", with_cache=True, raw=True, exporter="torchscript")
    path = converted(src, "fp16", str(tmp_path / "model_fp16.onnx"))
    layers, kv, head = export_hf.cache_shape("llama")
    feeds = {"input_ids": np.array([PROMPT], np.int64),
             "attention_mask": np.ones((1, len(PROMPT)), np.int64),
             "position_ids": np.arange(len(PROMPT), dtype=np.int64)[None],
             **{p: np.zeros((1, kv, 0, head), np.float16)
                for p, _ in export_hf.cache_names(layers)}}
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(17)),
                                     events_enabled=True)
    runtime.RuntimeSession(onnx.load(path)).run(context, feeds)
    kernels = [e.op_type for e in context.events()
               if e.action == runtime.RuntimeEventAction.kKernel]
    assert kernels.count("RMSNormalization") == 2 * layers + 1
    assert kernels.count("ScaledDotProductAttention") == layers
    assert "ReduceMean" not in kernels and "Softmax" not in kernels
