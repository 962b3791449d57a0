"""Decoder architectures beyond Llama/Qwen2/GPT-2, the path a user takes with their own
checkpoint: transformers builds each from a tiny config (random seeded weights, random biases
and norm weights, no download), torch.onnx.export (dynamo) writes it with a KV cache
(tests/python/models/export_hf.py, the raw exporter file), `prepare_decoder(..., bind="auto")`
binds the caches, and onnx-light must give transformers' own logits on a prompt (within 1e-4)
and its greedy tokens over 12 new tokens (transformers' eager attention is the reference).

Mistral, Qwen3 (per-head q/k RMS norms), Gemma (GELU, scaled embedding, 1 + weight norms),
Gemma2 (sliding window of 8 tokens, shorter than the prompt; soft-capped attention and
logits; norms after each block), Phi (LayerNorm, partial rotary, parallel attention and MLP),
OLMo (non-parametric LayerNorm), Granite (embedding, attention, residual and logit
multipliers), Phi-3 (fused qkv and gate/up projections), StableLM (partial rotary,
LayerNorm), StarCoder2 (GELU MLP with biases), Cohere (bias-free LayerNorm, parallel blocks,
logit scale), Falcon (the new decoder architecture, grouped KV heads), Gemma 3 (per-head q/k
norms; a sliding window of 8 tokens on one layer, the other global).

The first seven through onnxruntime-genai's model builder (fp32 and int4 CPU builds:
GroupQueryAttention, MatMulNBits, the builder's fused norms), prepared the same way, give
onnxruntime-genai's own greedy tokens on the same build; prepared with paged="rows" (each
GroupQueryAttention rewritten onto PagedAttention), the same builds give those tokens to
every request of the batched RequestScheduler and of `serve`."""
from __future__ import annotations

import os

import numpy as np
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

PROMPT = [5, 17, 33, 9, 41, 7, 100, 3, 200, 64, 12]  # 11 tokens: past Gemma2's window of 8
NEW_TOKENS = 12


@pytest.fixture(scope="module", params=export_hf.OTHER_ARCHS)
def exported(request):
    """(arch, transformers model, prepared onnx-light model)."""
    arch = request.param
    raw = export_hf.ensure(arch, with_cache=True, raw=True)
    path = raw[: -len(".onnx")] + ".prepared.onnx"
    if not os.path.exists(path):
        prepare.prepare_decoder(raw, path, bind="auto")
    return arch, export_hf.build(arch), ol_onnx.load_model(path)


def context():
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))


def test_prompt_logits_match_transformers(exported):
    import torch

    arch, reference, model = exported
    with torch.no_grad():
        expected = reference(torch.tensor([PROMPT])).logits[0].numpy()
    state = runtime.PersistentValueState(model, initial=export_hf.empty_cache(arch))
    n = len(PROMPT)
    out = state.run(context(), {"input_ids": np.array([PROMPT], np.int64),
                                "attention_mask": np.ones((1, n), np.int64),
                                "position_ids": np.arange(n, dtype=np.int64)[None]})
    got = np.from_dlpack(out["logits"])[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0, err_msg=arch)


def test_greedy_tokens_match_transformers(exported):
    import torch

    arch, reference, model = exported
    with torch.no_grad():
        expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS,
                                      min_new_tokens=NEW_TOKENS, do_sample=False)
    tokens = runtime.generate(model, context(),
                              {"input_ids": np.array([PROMPT], np.int64),
                               **export_hf.empty_cache(arch)},
                              runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
    assert np.from_dlpack(tokens)[0].tolist() == expected[0].tolist(), arch


# The same architectures through onnxruntime-genai's model builder (fp32 and int4 CPU
# builds, tests/python/models/genai_builder.py, `prepare --bind auto`), against
# onnxruntime-genai's own greedy search on the same build.
# Phi-3: the builder installed here fails on its own (KeyError: 'multi_cache'); StableLM,
# StarCoder2, Cohere and Falcon are not among the builder's architectures.
GENAI_ARCHS = ("mistral", "qwen3", "gemma", "gemma2", "phi", "olmo", "granite")


def genai_tokens(path):
    """onnxruntime-genai's own greedy tokens for PROMPT on the build in `path`'s folder."""
    import onnxruntime_genai as og

    generator_model = og.Model(os.path.dirname(path))
    params = og.GeneratorParams(generator_model)
    params.set_search_options(max_length=len(PROMPT) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(generator_model, params)
    generator.append_tokens(PROMPT)
    expected = []
    while not generator.is_done():
        generator.generate_next_token()
        expected.append(int(generator.get_next_tokens()[0]))
    return expected


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("arch", GENAI_ARCHS)
def test_genai_builds_give_onnxruntime_genai_tokens(arch, precision):
    import json

    from models import genai_builder

    path = genai_builder.ensure(arch, precision)
    folder = os.path.dirname(path)
    expected = genai_tokens(path)
    prepared = os.path.join(folder, "model.prepared.onnx")
    if not os.path.exists(prepared):
        prepare.prepare_decoder(path, prepared, bind="auto")
    model = ol_onnx.load_model(prepared)
    with open(os.path.join(folder, "genai_config.json")) as f:
        decoder = json.load(f)["model"]["decoder"]
    caches = {i.name: np.zeros((1, decoder["num_key_value_heads"], 0, decoder["head_size"]),
                               np.float32)
              for i in model.graph.input if i.name.startswith("past_key_values.")}
    tokens = runtime.generate(model, context(), {"input_ids": np.array([PROMPT], np.int64),
                                                 **caches},
                              runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
    assert np.from_dlpack(tokens)[0, len(PROMPT):].tolist() == expected, (arch, precision)


# The batched path (docs/generation.md, "Continuous batching"): `prepare_decoder(...,
# paged="rows")` rewrites the export's attention onto ai.rt::PagedAttention over row caches,
# and RequestScheduler runs two requests as rows of one call per step; each gets
# transformers' greedy tokens (Gemma 3's sliding layer past its window of 8: the rewrite reads
# the window from the export's mask, see test_prepare_paged.py). Gemma2 is refused with a clear error: its soft-capped scores
# (Div, Tanh, Mul between the scores and the Softmax) are not a form the rewrite takes.
PAGED_ARCHS = tuple(a for a in export_hf.OTHER_ARCHS if a != "gemma2")


@pytest.mark.parametrize("arch", PAGED_ARCHS)
def test_paged_rows_batched_give_transformers_tokens(arch):
    import torch

    raw = export_hf.ensure(arch, with_cache=True, raw=True)
    path = raw[: -len(".onnx")] + ".paged_rows.onnx"
    if not os.path.exists(path):
        prepare.prepare_decoder(raw, path, bind="auto", paged="rows")
    with torch.no_grad():
        expected = export_hf.build(arch).generate(
            torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
            do_sample=False)[0].tolist()
    model = ol_onnx.load_model(path)
    layers = export_hf.cache_shape(arch)[0]
    feeds = {"input_ids": np.array([PROMPT], np.int64),
             **{f"past_key_values.{i}": [{"blocks": []}] for i in range(layers)}}
    scheduler = runtime.RequestScheduler(context(), max_in_flight=2)
    handles = [scheduler.submit(model, feeds, runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
               for _ in range(2)]
    for handle in handles:
        assert np.from_dlpack(handle.result())[0].tolist() == expected, arch
    scheduler.wait_idle()
    assert scheduler.stats()["mode"] == "batched"


def test_gemma2_soft_capped_attention_runs_as_one_fused_kernel():
    """Gemma 2's scores, capped as softcap * tanh(s / softcap) between the product and the
    mask, fuse into ScaledDotProductAttention (its softcap attribute): a decode step runs one
    fused attention per layer and no Softmax, so no head-repeated copy of the caches, and one
    Gelu per layer (the logits and tokens above hold the result to transformers')."""
    import collections

    raw = export_hf.ensure("gemma2", with_cache=True, raw=True)
    path = raw[: -len(".onnx")] + ".prepared.onnx"
    if not os.path.exists(path):
        prepare.prepare_decoder(raw, path, bind="auto")
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                 events_enabled=True)
    state = runtime.PersistentValueState(ol_onnx.load_model(path),
                                         initial=export_hf.empty_cache("gemma2"))
    n = len(PROMPT)
    state.run(ctx, {"input_ids": np.array([PROMPT], np.int64),
                    "attention_mask": np.ones((1, n), np.int64),
                    "position_ids": np.arange(n, dtype=np.int64)[None]})
    before = len(ctx.events())
    state.run(ctx, {"input_ids": np.array([[3]], np.int64),
                    "attention_mask": np.ones((1, n + 1), np.int64),
                    "position_ids": np.array([[n]], np.int64)})
    ops = collections.Counter(e.op_type for e in ctx.events()[before:]
                              if e.action == runtime.RuntimeEventAction.kKernel)
    layers = export_hf.cache_shape("gemma2")[0]
    assert ops["ScaledDotProductAttention"] == layers
    assert ops["Softmax"] == 0
    # Its tanh GELU (Pow, Mul, Add, Tanh, ...) is one Gelu per layer too.
    assert ops["Gelu"] == layers and ops["Pow"] == 0
    state.close()


def test_a_soft_capped_lm_head_computes_the_prompts_last_row_alone():
    """Gemma 2 caps its logits (Div, Tanh, Mul after the LM head's MatMul). Asked for the
    last position only (what generate asks on the prompt step), the MatMul computes the last
    row alone and the cap runs on that row: under a run budget of 1 MiB the whole prompt's
    logits (11 x 32768 FLOAT, 1.4 MB) do not fit, the last row does, and it equals the last
    row of the whole logits."""
    raw = export_hf.ensure("gemma2", with_cache=True, size="vocab32k", raw=True)
    path = raw[: -len(".onnx")] + ".prepared.onnx"
    if not os.path.exists(path):
        prepare.prepare_decoder(raw, path, bind="auto")
    model = ol_onnx.load_model(path)
    n = len(PROMPT)
    feeds = {"input_ids": np.array([PROMPT], np.int64),
             "attention_mask": np.ones((1, n), np.int64),
             "position_ids": np.arange(n, dtype=np.int64)[None]}

    def run(last, budget):
        state = runtime.PersistentValueState(
            model, initial=export_hf.empty_cache("gemma2", 1, "vocab32k"),
            options=runtime.RuntimeSessionOptions(max_run_bytes=budget))
        out = state.run(context(), feeds, output_names=["logits"], last_position_only=last)
        return np.from_dlpack(out["logits"]).copy()

    whole = run(False, 0)
    last = run(True, 1 << 20)
    assert whole.shape == (1, n, 32768) and last.shape == (1, 1, 32768)
    np.testing.assert_allclose(last[0, 0], whole[0, -1], atol=1e-5, rtol=0)
    with pytest.raises(MemoryError, match=r"MatMul node '.*': allocating 1441792 bytes"):
        run(False, 1 << 20)


def test_gemma2_soft_capped_attention_is_refused_by_the_paged_rewrite():
    raw = export_hf.ensure("gemma2", with_cache=True, raw=True)
    out = raw[: -len(".onnx")] + ".paged_rows_refused.onnx"  # beside its external data
    with pytest.raises(prepare.PrepareError, match="does not read MatMul\\(q, k\\) scores"):
        prepare.prepare_decoder(raw, out, bind="auto", paged="rows")
    assert not os.path.exists(out)  # nothing written


# onnxruntime-genai's builds through the batched path: the rewrite turns each
# GroupQueryAttention (packed or separate q/k/v, rotary inside, positions from the mask) into
# PagedAttention over row caches with the rotary as RotaryEmbedding over a new position_ids
# input; two requests as rows of one call each get onnxruntime-genai's own tokens, fp32 and
# int4 (the builds CPU users run). Gemma2's soft cap is refused.
GENAI_PAGED_ARCHS = tuple(a for a in GENAI_ARCHS if a != "gemma2")


@pytest.mark.parametrize("precision", ["fp32", "int4"])
@pytest.mark.parametrize("arch", GENAI_PAGED_ARCHS)
def test_genai_builds_batched_on_paged_rows_give_onnxruntime_genai_tokens(arch, precision):
    from models import genai_builder

    path = genai_builder.ensure(arch, precision)
    paged = os.path.join(os.path.dirname(path), "model.paged_rows.onnx")
    report = prepare.prepare_decoder(path, paged, bind="auto", paged="rows")
    assert ("input", "attention_mask") in {(r.op_type, r.input_name) for r in report.rewrites}
    assert "logits equal onnx-light's on the original within" in report.checks[0]
    model = ol_onnx.load_model(paged)
    inputs = {i.name for i in model.graph.input}
    assert "position_ids" in inputs and "attention_mask" not in inputs
    assert not any(n.op_type == "GroupQueryAttention" for n in model.graph.node)
    layers = [name for name in inputs if name.startswith("past_key_values.")]
    feeds = {"input_ids": np.array([PROMPT], np.int64),
             **{name: [{"blocks": []}] for name in layers}}
    scheduler = runtime.RequestScheduler(context(), max_in_flight=2)
    handles = [scheduler.submit(model, feeds, runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
               for _ in range(2)]
    expected = genai_tokens(path)
    for handle in handles:
        assert np.from_dlpack(handle.result())[0, len(PROMPT):].tolist() == expected, \
            (arch, precision)
    scheduler.wait_idle()
    assert scheduler.stats()["mode"] == "batched"


def test_genai_gemma2_soft_cap_is_refused_by_the_paged_rewrite():
    from models import genai_builder

    path = genai_builder.ensure("gemma2", "fp32")
    out = os.path.join(os.path.dirname(path), "model.paged_rows_refused.onnx")
    with pytest.raises(prepare.PrepareError, match="GroupQueryAttention node .* soft-caps its "
                                                   "scores \\(softcap 50\\)"):
        prepare.prepare_decoder(path, out, bind="auto", paged="rows")
    assert not os.path.exists(out)


def test_serve_batches_a_paged_int4_build_and_answers_as_generate_alone():
    """`serve` on an int4 build prepared with paged="rows": the server's RequestScheduler
    steps in batched mode, and two completions sent at once are each the text of the tokens
    runtime.generate gives for that prompt alone."""
    from concurrent.futures import ThreadPoolExecutor

    openai = pytest.importorskip("openai")
    from models import genai_builder
    from onnx_light.serve import OpenAIApp, ServerThread
    from onnx_light.text import TextGenerator, empty_caches

    path = genai_builder.ensure("qwen3", "int4")
    folder = os.path.dirname(path)
    paged = os.path.join(folder, "model.paged_rows_serve.onnx")
    prepare.prepare_decoder(path, paged, bind="auto", paged="rows")
    app = OpenAIApp(TextGenerator(paged, folder), "qwen3-int4")
    prompts = ["the quick brown fox", "jumps over the lazy dog again and again"]
    with ServerThread(app, port=0) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0,
                               timeout=120)

        def complete(prompt):
            return client.completions.create(model="qwen3-int4", prompt=prompt, max_tokens=8,
                                             temperature=0)

        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(complete, prompts))
        assert app.scheduler.stats()["mode"] == "batched"
    gen = app.generator
    for prompt, reply in zip(prompts, replies):
        ids = gen.prompt_ids(prompt)
        feeds = {"input_ids": np.asarray([ids], np.int64), **empty_caches(gen.model)}
        alone = np.from_dlpack(runtime.generate(gen.model, gen.context, feeds,
                                                runtime.GenerationOptions(max_new_tokens=8)))
        assert reply.choices[0].text == gen.tokenizer.decode(alone[0, len(ids):].tolist())
        assert reply.usage.completion_tokens == alone.shape[1] - len(ids)


def test_genai_local_window_becomes_paged_left_window():
    """A GroupQueryAttention local_window_size of 4 (the last 4 keys, onnxruntime 1.32) becomes
    left_window_size 3; the rewrite's logits check runs past the window (a 6-token prompt and
    3 steps) against onnxruntime on the windowed original, so a window off by one is refused."""
    from models import genai_builder

    path = genai_builder.ensure("qwen3", "fp32")
    folder = os.path.dirname(path)
    model = ol_onnx.load_model(path)
    for node in model.graph.node:
        for attribute in node.attribute:
            if node.op_type == "GroupQueryAttention" and attribute.name == "local_window_size":
                attribute.i = 4
    windowed = os.path.join(folder, "model.window4.onnx")  # beside its external data
    ol_onnx.save_model(model, windowed)
    out = os.path.join(folder, "model.window4.paged_rows.onnx")
    report = prepare.prepare_decoder(windowed, out, bind="auto", paged="rows")
    assert "and onnxruntime's within" in report.checks[0]
    windows = [a.i for n in ol_onnx.load_model(out).graph.node if n.op_type == "PagedAttention"
               for a in n.attribute if a.name == "left_window_size"]
    assert windows == [3, 3]


@pytest.mark.parametrize("change,message", [
    ("position_ids", r"GroupQueryAttention node '.*' reads \['gqa_positions'\] \(position_ids, "
                     r"attention_bias or head_sink inputs\): the rewrite takes none of them"),
    ("no_cos_cache", r"GroupQueryAttention node '.*' rotates without a constant cos_cache"),
    ("no_projection", r"cannot tell the head size of GroupQueryAttention node '.*': its output "
                      r"is not read by a MatMul over an initializer or a MatMulNBits"),
])
def test_genai_attention_the_rewrite_cannot_take_is_refused_naming_it(change, message):
    """A GroupQueryAttention with inputs the rewrite does not map, a rotary without a
    constant cache, or an output the head size cannot be read from: PrepareError naming the
    node and the reason, nothing written."""
    from models import genai_builder

    path = genai_builder.ensure("qwen3", "fp32")
    folder = os.path.dirname(path)
    model = ol_onnx.load_model(path)
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    if change == "position_ids":
        gqa.input[9] = "gqa_positions"
        model.graph.input.add(name="gqa_positions").type.tensor_type.elem_type = 7
    elif change == "no_cos_cache":
        model.graph.input.add(name="cos_input").type.tensor_type.elem_type = 1
        gqa.input[7] = "cos_input"
    else:
        for node in model.graph.node:
            for i, name in enumerate(node.input):
                if name == gqa.output[0]:
                    node.input[i] = gqa.input[0]  # the projection reads something else
        model.graph.output.add(name=gqa.output[0])
    edited = os.path.join(folder, f"model.refused_{change}.onnx")
    ol_onnx.save_model(model, edited)
    out = os.path.join(folder, f"model.refused_{change}.paged_rows.onnx")
    with pytest.raises(prepare.PrepareError, match=message):
        prepare.prepare_decoder(edited, out, bind="auto", paged="rows")
    assert not os.path.exists(out)
