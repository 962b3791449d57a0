"""The variants the Hub's ONNX repositories ship beside model.onnx, each made by onnxruntime's
own tools from a TorchScript export (what Optimum writes): model_fp16 (convert_float_to_float16:
every tensor FLOAT16, the caches too), model_q4 (MatMulNBitsQuantizer: int4 MatMulNBits,
block 32), model_q4f16 (both) and model_bnb4 (MatMulBnb4Quantizer: bitsandbytes NF4 or FP4
codes, block 64). Each, prepared with `prepare_decoder(bind="auto")`, gives
onnxruntime's greedy tokens on the same file; FLOAT16 MatMul (read as 16 bits, never packed
as FLOAT) matches a float64 reference and onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import export_hf, hub_variants
from onnx import TensorProto, helper, numpy_helper

from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

PROMPT = [3, 44, 18, 91, 27, 60, 2, 77]  # no near-tie on any of the variants
NEW_TOKENS = 8


def converted(src: str, kind: str, out: str) -> str:
    return hub_variants.convert(src, kind, out)


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
@pytest.mark.parametrize("kind", ["fp16", "q4", "q4f16", "bnb4", "bnb4_fp4"])
def test_a_hub_variant_generates_onnxruntimes_tokens(tmp_path, arch, kind):
    src = export_hf.ensure(arch, with_cache=True, raw=True, exporter="torchscript")
    path = converted(src, kind, str(tmp_path / f"model_{kind}.onnx"))
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert ("MatMulNBits" in ops) == kind.startswith("q4")
    assert ("MatMulBnb4" in ops) == kind.startswith("bnb4")
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


def test_a_float16_models_norms_attention_and_products_run_fused(tmp_path):
    """convert_float_to_float16 makes the norms' constants (the square's 2, eps) and the
    attention's scales FLOAT16, and its weights are FLOAT16: the plan still fuses each norm
    into one RMSNormalization, each layer's attention into one ScaledDotProductAttention
    (computed in FLOAT, rounded once) and the products that share an input into MatMulGroups,
    and no ReduceMean or Softmax is left."""
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
    # q/k/v and gate/up each one product over their 16-bit weights side by side; the MLP's
    # gate one SiluMul(G, U).
    assert kernels.count("MatMulGroup") == 2 * layers
    assert kernels.count("SiluMul") == layers
    assert "ReduceMean" not in kernels and "Softmax" not in kernels


def bnb4_matmul(k: int, n: int, block: int, quant_type: int, b, absmax, dtype=np.float32):
    t = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("MatMulBnb4", ["A", "B", "absmax"], ["Y"], domain="com.microsoft", K=k,
                          N=n, block_size=block, quant_type=quant_type)], "g",
        [helper.make_tensor_value_info("A", t, None)], [helper.make_tensor_value_info("Y", t, None)],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(absmax.astype(dtype), "absmax")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
def test_the_bnb4_codebooks_are_onnxruntimes(quant_type):
    """Each of the 16 codes, scaled by absmax 1 and 2, read back through an identity A: the
    values and the nibble order (even flat index high) are onnxruntime's."""
    codes = np.array(list(range(16)) + list(range(15, -1, -1)), np.uint8)  # W [2, 16] flattened
    b = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    model = bnb4_matmul(16, 2, 16, quant_type, b, np.array([1.0, 2.0], np.float32))
    feeds = {"A": np.eye(16, dtype=np.float32)}
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    ours = np.from_dlpack(runtime.RuntimeSession(model).run(context, feeds)["Y"])
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("m,k,n,block", [(1, 576, 1536, 64), (3, 128, 40, 32), (4, 64, 33, 64),
                                         (2, 40, 7, 16), (1, 30, 5, 64), (9, 256, 48, 64),
                                         (130, 96, 70, 32)])
@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "float16"])
def test_bnb4_matmul_matches_onnxruntime(m, k, n, block, quant_type, dtype):
    """Vector GEMV (whole 32-code steps in whole blocks per row), element GEMV (blocks that
    straddle rows, odd K), and the panel GEMM of more than 4 rows, against onnxruntime on the
    file its MatMulBnb4Quantizer writes."""
    from onnxruntime.capi._pybind_state import quantize_matmul_bnb4

    rng = np.random.default_rng(m * 7 + k + n + block + quant_type)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = np.zeros((n * k + 1) // 2, np.uint8)
    absmax = np.zeros((n * k + block - 1) // block, np.float32)
    quantize_matmul_bnb4(b, np.ascontiguousarray(w.T), absmax, block, quant_type, n, k)
    model = bnb4_matmul(k, n, block, quant_type, b, absmax, dtype)
    a = rng.standard_normal((1, m, k)).astype(dtype)
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    session = runtime.RuntimeSession(model)
    for _ in range(2):
        ours = np.from_dlpack(session.run(context, {"A": a})["Y"])
        assert ours.dtype == dtype and ours.shape == (1, m, n)
        scale = np.abs(theirs.astype(np.float32)).max()
        tol = 2e-3 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=tol,
                                   atol=tol * scale)


def test_bnb4_refuses_a_weight_of_the_wrong_size_naming_it():
    model = bnb4_matmul(16, 2, 16, 1, np.zeros(15, np.uint8), np.ones(2, np.float32))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    with pytest.raises(Exception, match="input 'B' must be UINT8 with \\(N \\* K \\+ 1\\) / 2 = 16 "
                                        "elements, got UINT8 \\[15\\]"):
        runtime.RuntimeSession(model).run(context, {"A": np.ones((1, 16), np.float32)})


@pytest.mark.parametrize("arch,kind", [("llama", "fp32"), ("llama", "fp16"), ("llama", "q4f16"),
                                       ("llama", "bnb4"), ("qwen2", "fp32"), ("gpt2", "fp32")])
def test_a_torchscript_export_and_its_variants_run_batched_after_prepare_paged_rows(tmp_path,
                                                                                   arch, kind):
    """What Optimum writes (the TorchScript exporter: the past wrapped in a one-input Concat,
    Shape reads of the caches for the head repeat, a mask that reads the embedding), as is
    and as the Hub's variants: prepared with paged='rows', the RequestScheduler decodes the
    requests together, each getting the tokens it gets alone, onnxruntime's on the file."""
    from test_prepare_paged import check_scheduled_as_alone

    src = export_hf.ensure(arch, with_cache=True, raw=True, exporter="torchscript")
    path = converted(src, kind, str(tmp_path / f"model_{kind}.onnx"))
    prepare.prepare_decoder(path, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(str(tmp_path / "rows.onnx"))
    layers = export_hf.cache_shape(arch)[0]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rng = np.random.default_rng(5)
    feeds = [{"input_ids": rng.integers(1, 128, (1, n), dtype=np.int64),
              **{f"past_key_values.{i}": [{"blocks": []}] for i in range(layers)}}
             for n in (4, 9, 2, 6)]
    stats = check_scheduled_as_alone(model, context, path, feeds, "batched")
    assert stats["max_batch_size"] > 1


def test_a_float16_prompt_long_enough_for_tiles_gives_onnxruntimes_logits(tmp_path):
    """A 150-token prompt takes the tiled prompt attention, under the FLOAT16 export's causal
    mask (masked entries finfo(float16).min, -65504, which the tiles skip where the scores'
    bound proves them 0): the logits of every position are onnxruntime's on the same file and
    the FLOAT export's within 4 FLOAT16 ulps of the largest logit (seen: 1 ulp)."""
    src = export_hf.ensure("llama", with_cache=True, raw=True, exporter="torchscript")
    path = converted(src, "fp16", str(tmp_path / "model_fp16.onnx"))
    layers, kv, head = export_hf.cache_shape("llama")
    n = 150
    ids = np.random.default_rng(3).integers(0, export_hf.vocab_size("llama"), (1, n))
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((1, n), np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None],
             **{p: np.zeros((1, kv, 0, head), np.float16)
                for p, _ in export_hf.cache_names(layers)}}
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(17)),
                                     events_enabled=True)
    ours = np.from_dlpack(runtime.RuntimeSession(onnx.load(path)).run(context, feeds)["logits"])
    kernels = [e.op_type for e in context.events()
               if e.action == runtime.RuntimeEventAction.kKernel]
    assert kernels.count("ScaledDotProductAttention") == layers
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        ["logits"], feeds)[0]
    as_float = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()}
    reference = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(
        ["logits"], as_float)[0]
    assert ours.shape == theirs.shape == (1, n, export_hf.vocab_size("llama"))
    tolerance = 4 * float(np.spacing(np.float16(np.abs(theirs).max())))
    assert np.abs(ours.astype(np.float32) - theirs.astype(np.float32)).max() <= tolerance
    assert np.abs(ours.astype(np.float32) - reference).max() <= tolerance
