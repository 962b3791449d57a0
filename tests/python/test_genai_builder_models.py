"""Decoders written by onnxruntime-genai's model builder (fp32 and int4 CPU builds of tiny
random-weight Llama and Qwen2 checkpoints, tests/python/models/genai_builder.py) run through
onnx-light's plain session API, a prompt call then decode calls feeding the presents back,
and agree with onnxruntime on the same file:
  - the op list of each build is the one recorded here (a newer builder that emits another
    op fails loudly here, before any kernel is missing at run time);
  - fp32: logits and presents within 1e-4;
  - int4: MatMulNBits runs at the builder's accuracy_level 4, which quantizes activations to
    int8 in both runtimes (onnx-light for decode rows, in groups of 32; in float for the
    prompt). The tolerance is onnxruntime's own int8 error: the distance of its level-4 run
    from its level-0 run (the float product with the same dequantized weights) on the same
    file. onnx-light stays within twice that (plus 1e-4) of both runs; and its prompt logits,
    computed in float, within 1e-4 of the level-0 run;
  - fp16 with GroupQueryAttention (the builder's fp16 CPU build with GQA, genai_builder
    "fp16-gqa"): runtime.generate with bound FLOAT16 caches gives onnxruntime's greedy tokens."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models import genai_builder, genai_compare
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

_COMMON = {("", "Cast"), ("", "Constant"), ("", "Gather"), ("", "Mul"), ("", "ReduceSum"),
           ("", "Shape"), ("", "Sigmoid"), ("", "SimplifiedLayerNormalization"), ("", "Sub"),
           ("com.microsoft", "GroupQueryAttention"),
           ("com.microsoft", "SkipSimplifiedLayerNormalization")}
_FP32 = _COMMON | {("", "MatMul"), ("", "Transpose")}
_INT4 = _COMMON | {("", "Reshape"), ("com.microsoft", "MatMulNBits"),
                   ("com.microsoft", "GatherBlockQuantized")}
# Qwen2's Q/K/V biases are Adds after the projections.
EXPECTED_OPS = {("llama", "fp32"): _FP32, ("llama", "int4"): _INT4,
                ("qwen2", "fp32"): _FP32 | {("", "Add")}, ("qwen2", "int4"): _INT4 | {("", "Add")}}
CASES = [(arch, precision) for arch in ("llama", "qwen2") for precision in ("fp32", "int4")]
# The tiny builds and 2-layer builds with every width of the real shapes (SmolLM2-135M:
# hidden 576, 9/3 heads, vocab 49152; Qwen2.5-0.5B: hidden 896, 14/2 heads, vocab 151936).
PREPARED_CASES = [(arch, precision, size) for arch, precision in CASES
                  for size in ("tiny", genai_builder.REAL_SIZES[arch][1])]
DECODE_STEPS = 3


def _ops(path):
    model = onnx.load(path, load_external_data=False)
    return {(n.domain, n.op_type) for n in model.graph.node}


def _layers(path):
    model = onnx.load(path, load_external_data=False)
    return [i for i in model.graph.input if i.name.startswith("past_key_values.")]


def _head_size(path):
    with open(os.path.join(os.path.dirname(path), "genai_config.json")) as f:
        return json.load(f)["model"]["decoder"]["head_size"]


def _steps(run, path, tokens, cache=None):
    """Outputs of the prompt call (tokens[0]) and of one decode call per later token, the
    presents fed back as the next call's pasts (the same tokens for every runtime). The
    caches start empty (FLOAT unless `cache` is given)."""
    pasts = _layers(path)
    if cache is None:
        cache = {p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0,
                                   _head_size(path)), np.float32) for p in pasts}
    total, results = 0, []
    for ids in tokens:
        total += ids.shape[1]
        out = run({"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **cache})
        results.append(out)
        cache = {p.name: out[p.name.replace("past_key_values.", "present.")] for p in pasts}
    return results


def _ort_runner(path, accuracy_level=None):
    session = genai_compare.ort_session(path, accuracy_level)
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds)))


def _ol_runner(path):
    model = ol_onnx.load_model(path)
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))

    def run(feeds):
        out = session.run(context, feeds)
        return {name: np.from_dlpack(value).copy() for name, value in out.items()}
    return run


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{p}" for a, p in CASES])
def built(request):
    arch, precision = request.param
    return arch, precision, genai_builder.ensure(arch, precision)


def test_builder_emits_exactly_the_recorded_op_list(built):
    arch, precision, path = built
    assert _ops(path) == EXPECTED_OPS[(arch, precision)]


@pytest.mark.parametrize("arch, precision, size", PREPARED_CASES,
                         ids=[f"{s}-{a}-{p}" for a, p, s in PREPARED_CASES])
def test_prepared_build_gives_onnxruntimes_greedy_tokens_and_logits(arch, precision, size):
    """`prepare --bind auto` on the builder's file, then runtime.generate: onnxruntime's
    greedy tokens on the original file, and at every step (onnxruntime's tokens fed) the
    last-position logits within 1e-4 (fp32) or, from onnxruntime's level-0 float run,
    within twice onnxruntime's own int8-activation error plus 1e-4 (int4):
    models/genai_compare.py, which perf/check_genai_real_shapes.py runs on the 30- and
    24-layer shapes. The 2-layer builds cost ~15 s (SmolLM2 width) and ~30 s (Qwen2.5
    width) each the first time, then come from build/models/genai."""
    path = genai_builder.ensure(arch, precision, size)
    assert _ops(path) == EXPECTED_OPS[(arch, precision)]
    result = genai_compare.compare(path)
    assert result.ours == result.theirs, result.format()
    assert result.within, result.format()


def _max_diff(a, b, name):
    assert a[name].shape == b[name].shape, name
    return float(np.abs(a[name] - b[name]).max())


def test_builder_model_matches_onnxruntime_on_prompt_and_decode(built):
    arch, precision, path = built
    rng = np.random.default_rng(7)
    tokens = [rng.integers(3, 120, (1, 6), dtype=np.int64)]
    tokens += [rng.integers(3, 120, (1, 1), dtype=np.int64) for _ in range(DECODE_STEPS)]
    ours = _steps(_ol_runner(path), path, tokens)
    names = ["logits"] + [p.name.replace("past_key_values.", "present.") for p in _layers(path)]
    if precision == "fp32":
        theirs = _steps(_ort_runner(path), path, tokens)
        for step, (a, b) in enumerate(zip(ours, theirs)):
            for name in names:
                assert _max_diff(a, b, name) <= 1e-4, (step, name)
        return
    float_path = _steps(_ort_runner(path, accuracy_level=0), path, tokens)
    level4 = _steps(_ort_runner(path), path, tokens)
    for step, (a, ref, q) in enumerate(zip(ours, float_path, level4)):
        for name in names:
            own_error = _max_diff(q, ref, name)
            assert _max_diff(a, ref, name) <= 2 * own_error + 1e-4, (step, name)
            assert _max_diff(a, q, name) <= 2 * own_error + 1e-4, (step, name)
    # The prompt (M = 6 rows) at accuracy_level 4 multiplies int8 activations like
    # onnxruntime's level 4 (AVX-512 VNNI; without it, the dequantized weights in float):
    # either way within twice onnxruntime's own distance from the float product, as checked
    # above. tests/cpp/ops_contrib/test_nbits_gemm.cc pins both paths exactly.


def test_last_position_logits_of_the_prompt_equal_the_last_row(built):
    """session.run(..., last_position_only=True) on the prompt: the LM head (MatMul, or
    MatMulNBits in the int4 builds) multiplies the last row alone. fp32: that row of the
    whole logits within 1e-5. int4: one row is decode-shaped, so it takes the int8 path; it
    stays within twice onnxruntime's own int8 error (level 4 against level 0) of the float
    reference, like the decode steps above."""
    arch, precision, path = built
    ids = np.random.default_rng(11).integers(3, 120, (1, 6), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, 6), np.int64),
             **{p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0,
                                  _head_size(path)), np.float32) for p in _layers(path)}}
    model = ol_onnx.load_model(path)
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    whole = np.from_dlpack(session.run(context, feeds, output_names=["logits"])["logits"])
    last = np.from_dlpack(session.run(context, feeds, output_names=["logits"],
                                      last_position_only=True)["logits"])
    assert whole.shape[1] == 6 and last.shape == (1, 1, whole.shape[2])
    if precision == "fp32":
        assert np.abs(last[0, 0] - whole[0, -1]).max() <= 1e-5
        return
    ref = _ort_runner(path, accuracy_level=0)(feeds)["logits"][0, -1]
    own_error = float(np.abs(_ort_runner(path)(feeds)["logits"][0, -1] - ref).max())
    assert np.abs(last[0, 0] - ref).max() <= 2 * own_error + 1e-4


def test_generate_refuses_to_run_past_the_rotary_tables():
    """A genai build has no position input: its GroupQueryAttention nodes rotate with the
    rows of the cos_cache/sin_cache initializers (max_position_embeddings of them). generate
    refuses the step whose position would be past them, naming the table and the node, after
    publishing the tokens before it; without the check the kernel would fail deep inside the
    graph (or, in a kernel that trusted its inputs, read past the table)."""
    path = genai_builder.ensure("llama", "fp32")
    model = ol_onnx.load_model(path)
    pasts = _layers(path)
    for p in pasts:
        binding = model.graph.persistent_bindings.add()
        binding.input_name = p.name
        binding.output_name = p.name.replace("past_key_values.", "present.")
    rows = next(i.dims[0] for i in onnx.load(path, load_external_data=False).graph.initializer
                if i.name == "cos_cache")
    assert rows == 256
    cache = {p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0,
                               _head_size(path)), np.float32) for p in pasts}
    prompt = np.arange(3, 3 + 250, dtype=np.int64)[None] % 120
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    tokens = []
    with pytest.raises(ValueError) as error:
        runtime.generate(model, context, {"input_ids": prompt, **cache},
                         runtime.GenerationOptions(max_new_tokens=20),
                         on_token=lambda step, ids: tokens.append(ids) or True)
    message = str(error.value)
    assert "position 256 is past the model's limit of 256 positions" in message
    assert "the rotary table 'cos_cache' of GroupQueryAttention node" in message
    assert "/model/layers.0/attn/GroupQueryAttention" in message
    assert len(tokens) == 7  # the calls that fed positions up to 249, 250, ..., 255
    # A prompt longer than the table is refused before any call.
    tokens.clear()
    with pytest.raises(ValueError, match="position 299 is past the model's limit of 256 "
                                         "positions .the rotary table 'cos_cache'"):
        runtime.generate(model, context, {"input_ids": np.arange(300, dtype=np.int64)[None] % 120,
                                          **cache},
                         runtime.GenerationOptions(max_new_tokens=2),
                         on_token=lambda step, ids: tokens.append(ids) or True)
    assert tokens == []


def test_fp16_gqa_build_generates_onnxruntime_greedy_tokens_with_bound_float16_caches():
    """The builder's fp16 CPU decoder with GroupQueryAttention (genai_builder "fp16-gqa"):
    FLOAT16 caches, packed QKV, rotary inside the attention. runtime.generate with the caches
    bound (16-bit rows appended in place) gives onnxruntime's greedy tokens on the same file
    (onnxruntime fed its own FLOAT16 presents), and every step's logits agree within 2e-3
    (onnxruntime rounds the rotated query to FLOAT16, onnx-light keeps it FLOAT)."""
    path = genai_builder.ensure("llama", "fp16-gqa")
    assert _ops(path) == _FP32
    pasts = _layers(path)
    assert {p.type.tensor_type.elem_type for p in pasts} == {onnx.TensorProto.FLOAT16}
    prompt = np.random.default_rng(3).integers(3, 120, (1, 7), dtype=np.int64)
    new_tokens = 8
    cache = {p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0,
                               _head_size(path)), np.float16) for p in pasts}
    run_ort, ids, feeds_cache, expected, ort_logits = _ort_runner(path), prompt, cache, [], []
    for _ in range(new_tokens):
        total = prompt.shape[1] + len(expected)
        out = run_ort({"input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
                       **feeds_cache})
        ort_logits.append(out["logits"][0, -1].astype(np.float32))
        expected.append(int(out["logits"][0, -1].argmax()))
        ids = np.array([[expected[-1]]], np.int64)
        feeds_cache = {p.name: out[p.name.replace("past_key_values.", "present.")] for p in pasts}
    ours = _steps(_ol_runner(path), path, [prompt] + [np.array([[t]], np.int64)
                                                      for t in expected[:-1]], cache)
    for step, out in enumerate(ours):
        np.testing.assert_allclose(out["logits"][0, -1].astype(np.float32), ort_logits[step],
                                   atol=2e-3, rtol=2e-3)
    model = ol_onnx.load_model(path)
    for p in pasts:
        binding = model.graph.persistent_bindings.add()
        binding.input_name = p.name
        binding.output_name = p.name.replace("past_key_values.", "present.")
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    tokens = runtime.generate(model, context, {"input_ids": prompt, **cache},
                              runtime.GenerationOptions(max_new_tokens=new_tokens))
    assert np.asarray(tokens)[0, prompt.shape[1]:].tolist() == expected
