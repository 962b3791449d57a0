"""Decoders exported by torch's TorchScript exporter (torch.onnx.export(dynamo=False), what
Hugging Face Optimum and most ONNX decoders on the Hub were made with; Optimum's input and
output names, dynamic axes), with transformers' "sdpa" attention (Optimum's default) and
"eager": prepared with `prepare_decoder(bind="auto")`, an 11-token prompt and 12 decode steps
give transformers' logits (1e-4) and greedy tokens, and each layer's attention runs as one
fused kernel, and each RMS norm as one. That exporter keeps transformers' softmax(dtype=
float32) as a Cast to FLOAT before the value product, with grouped KV heads reads the
repeated V's shape to reshape the output, and writes rsqrt as Div(1, Sqrt): all three used
to leave these unfused (a Softmax and the head repeat's copies of the cache on every step,
six kernels a norm)."""
import collections

import numpy as np
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

PROMPT = [5, 17, 33, 9, 41, 7, 100, 3, 120, 64, 12]
NEW_TOKENS = 12


def build(arch, impl):
    import torch

    model = export_hf.build(arch)
    if arch not in export_hf.OTHER_ARCHS:  # random (not zero/one) biases and norm weights
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.1)
                elif "norm" in name or ".ln_" in name:
                    p.uniform_(0.5, 1.5)
    model.config._attn_implementation = impl
    return model


def cache_shape(model):
    c = model.config
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or getattr(c, "num_kv_heads", None) or heads
    return c.num_hidden_layers, kv, getattr(c, "head_dim", None) or c.hidden_size // heads


def empty_cache(model):
    layers, kv, head = cache_shape(model)
    return {p: np.zeros((1, kv, 0, head), np.float32) for p, _ in export_hf.cache_names(layers)}


def step_feeds(ids, start):
    total = start + len(ids)
    return {"input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None]}


def transformers_greedy(model):
    """transformers' greedy tokens (argmax per step, its own cache) and each step's logits."""
    import torch
    from transformers import DynamicCache

    cache, tokens, logits, start = DynamicCache(), list(PROMPT), [], 0
    ids = list(PROMPT)
    with torch.no_grad():
        for step in range(NEW_TOKENS + 1):
            feeds = {k: torch.from_numpy(v) for k, v in step_feeds(ids, start).items()}
            out = model(**feeds, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits.numpy().copy())
            start += len(ids)
            ids = [int(out.logits[0, -1].argmax())]
            if step < NEW_TOKENS:
                tokens.append(ids[0])
    return tokens, logits


CASES = [("llama", "sdpa"), ("llama", "eager"), ("qwen2", "sdpa"), ("phi3", "sdpa"),
         ("gemma", "sdpa"), ("falcon", "sdpa"), ("gpt2", "eager")]


@pytest.mark.parametrize("arch,impl", CASES)
def test_torchscript_export_matches_transformers_with_fused_attention(tmp_path, arch, impl):
    model = build(arch, impl)
    raw, path = str(tmp_path / "model.onnx"), str(tmp_path / "model.prepared.onnx")
    export_hf.export_torchscript(model, raw)
    prepare.prepare_decoder(raw, path, bind="auto")
    tokens, expected = transformers_greedy(model)
    onnx_model = ol_onnx.load_model(path)
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                 events_enabled=True)
    state = runtime.PersistentValueState(onnx_model, initial=empty_cache(model))
    ids, start, n = list(PROMPT), 0, len(PROMPT)
    for step in range(NEW_TOKENS + 1):
        before = len(ctx.events())
        got = np.from_dlpack(state.run(ctx, step_feeds(ids, start))["logits"]).copy()
        np.testing.assert_allclose(got, expected[step], atol=1e-4, rtol=0,
                                   err_msg=f"{arch}/{impl} step {step}")
        start += len(ids)
        ids = [tokens[n + step]] if step < NEW_TOKENS else []
    kernels = collections.Counter(e.op_type for e in ctx.events()[before:]
                                  if e.action == runtime.RuntimeEventAction.kKernel)
    layers = cache_shape(model)[0]
    assert kernels["ScaledDotProductAttention"] == layers, kernels
    assert kernels["Softmax"] == 0, kernels
    if arch in ("llama", "qwen2", "phi3", "gemma"):
        # Two RMS norms a layer and the final one, rsqrt written Div(1, Sqrt(...)) and the
        # cast back to FLOAT before the scale included.
        assert kernels["RMSNormalization"] == 2 * layers + 1, kernels
    if arch in ("llama", "qwen2", "gemma", "falcon"):
        # Q's and K's rotary embedding: prepare answered the Shape reads of the head size
        # that bound the halves' Slices (static_shapes), so they fuse.
        assert kernels["RotaryHalf"] == 2 * layers, kernels
    assert kernels["Cast"] <= 2, kernels  # the no-op casts are gone (not the mask's)
    if arch in ("llama", "qwen2", "gemma"):
        # The batch and sequence lengths every layer reads off its intermediates (Shape,
        # Gather) are read once off the inputs declaring them (static_shapes): the Shapes
        # left are two a layer (the cache length, which only bound inputs declare) and six
        # once (19 at two layers before, 7 a layer).
        assert kernels["Shape"] <= 2 * layers + 6, kernels
    generated = runtime.generate(onnx_model, runtime.RuntimeContext(
        runtime.KernelContext(runtime.default_opset(18))),
        {"input_ids": np.array([PROMPT], np.int64), **empty_cache(model)},
        runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
    assert np.from_dlpack(generated)[0].tolist() == tokens


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_a_prepared_torchscript_export_appends_every_cache_in_place(tmp_path, arch):
    """The TorchScript exporter wraps the first layer's past in a one-input Concat (a copy of
    the whole cache every step, which also kept that cache's append from extending the bound
    buffer). prepare removes it (and says so); then every cache is allocated once, on the
    prompt step, and each decode step writes only its new rows: no prefix byte copied."""
    model = build(arch, "eager" if arch == "gpt2" else "sdpa")
    raw, path = str(tmp_path / "model.onnx"), str(tmp_path / "model.prepared.onnx")
    export_hf.export_torchscript(model, raw)
    import onnx

    assert any(n.op_type == "Concat" and len(n.input) == 1
               and n.input[0] == "past_key_values.0.key" for n in onnx.load(raw).graph.node)
    report = prepare.prepare_decoder(raw, path, bind="auto")
    assert any(r.op_type == "Concat" and r.input_name == "past_key_values.0.key"
               and r.answer.startswith("removed") for r in report.rewrites)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    tokens = runtime.generate(ol_onnx.load_model(path), context,
                              {"input_ids": np.array([PROMPT], np.int64), **empty_cache(model)},
                              runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
    assert np.from_dlpack(tokens)[0].tolist() == transformers_greedy(model)[0]
    storage = [e for e in context.events()
               if e.action == runtime.RuntimeEventAction.kPersistentStorage]
    layers, kv, head = cache_shape(model)
    caches = 2 * layers
    assert sum(e.storage_allocations for e in storage) == caches
    assert sum(e.storage_prefix_copied_bytes for e in storage) == 0
    assert sum(e.storage_reuse_count for e in storage) == caches * (NEW_TOKENS - 1)
    rows = len(PROMPT) + NEW_TOKENS - 1
    assert sum(e.storage_append_copied_bytes for e in storage) == caches * rows * kv * head * 4
