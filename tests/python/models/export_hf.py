"""Builds small Llama- and GPT-2-architecture decoders with transformers from a config
(random weights, no download) and exports them with torch.onnx.export (dynamo).

Two exports per model:
  - cacheless: input_ids [batch, seq] -> logits [batch, seq, vocab] (a full-prefix model);
  - with a KV cache: input_ids [batch, seq], attention_mask [batch, past + seq],
    position_ids [batch, seq], past_key_values.N.key/value [batch, kv_heads, past, head_dim]
    -> logits [batch, seq, vocab], present.N.key/value [batch, kv_heads, past + seq, head_dim].

The cache exports are rewritten so that every past_key_values input has exactly one use (see
`single_use_caches`, which calls onnx_light.prepare's rewrite), as a persistent binding
requires; onnxruntime runs the same file. `ensure(..., raw=True)` keeps the exporter's file
as written (the input `python -m onnx_light prepare` expects).
Exports are cached under build/models, named by a hash of the config, the export code and the
torch/transformers versions, so a changed config never reuses a stale file:
    python tests/python/models/export_hf.py [OUT_DIR]
writes every tiny export and prints the paths. The ONNX files carry no persistent_bindings
(the ONNX format has none); `add_cache_bindings` adds them to an onnx_light model.
"""
from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import sys
import warnings

MODEL_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                          "build", "models"))

_SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
_QWEN05 = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
               num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
               rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)

# Named configs. "tiny" runs in CI on 2 cores; "bench" (Llama only) gives the generation
# benchmark a model big enough that kernel time, not call overhead, dominates.
CONFIGS = {
    ("llama", "tiny"): dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=256, rms_norm_eps=1e-6,
                            tie_word_embeddings=False),
    ("llama", "bench"): dict(vocab_size=1024, hidden_size=256, intermediate_size=688,
                             num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                             max_position_embeddings=1024, rms_norm_eps=1e-6,
                             tie_word_embeddings=False),
    ("gpt2", "tiny"): dict(vocab_size=128, n_positions=256, n_embd=64, n_layer=2, n_head=4),
    ("qwen2", "tiny"): dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=256, rms_norm_eps=1e-6,
                            tie_word_embeddings=False),
    # Real sizes (perf/bench_real_decode.py): the shapes of SmolLM2-135M and Qwen2.5-0.5B,
    # random weights. "*2l" keeps every width of the real shape with 2 layers (tests).
    ("llama", "smollm2"): dict(_SMOLLM2, num_hidden_layers=30),
    ("llama", "smollm2_2l"): dict(_SMOLLM2, num_hidden_layers=2),
    ("qwen2", "qwen05"): dict(_QWEN05, num_hidden_layers=24),
    ("qwen2", "qwen05_2l"): dict(_QWEN05, num_hidden_layers=2),
    # The shape of Llama-3.2-1B (4.9 GB of FLOAT weights, past protobuf's 2 GB: the export is
    # checked by path), its llama3 rope scaling included.
    ("llama", "llama32_1b"): dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                  num_hidden_layers=16, num_attention_heads=32,
                                  num_key_value_heads=8, max_position_embeddings=131072,
                                  rms_norm_eps=1e-5, rope_theta=500000.0,
                                  tie_word_embeddings=True,
                                  rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 8192}),
}

# Other decoder architectures a user exports the same way (tests/python/
# test_more_architectures.py): Mistral, Qwen3 (per-head q/k norms), Gemma (GELU, scaled
# embedding, 1 + weight norms), Gemma2 (a sliding window of 8 tokens, soft-capped logits,
# norms around each block), Phi (LayerNorm, partial rotary, parallel attention and MLP), OLMo
# (non-parametric LayerNorm), Granite (residual, attention and logit multipliers), Phi-3
# (fused qkv and gate/up projections), StableLM (partial rotary, LayerNorm), StarCoder2
# (GELU MLP with biases), Cohere (LayerNorm without bias, parallel blocks, logit scale),
# Falcon (the new decoder architecture, grouped KV heads), Gemma 3 (per-head q/k norms, a
# sliding-window layer beside a global one, each with its own rotary base). GPT-NeoX,
# Mixtral, Qwen2-MoE and Qwen3-MoE fail in torch.onnx.export itself (this torch), so they are
# not here.
_OTHER_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
OTHER_ARCHS = ("mistral", "qwen3", "gemma", "gemma2", "phi", "olmo", "granite", "phi3",
               "stablelm", "starcoder2", "cohere", "falcon", "gemma3_text")
CONFIGS.update({
    ("mistral", "tiny"): dict(_OTHER_TINY, rms_norm_eps=1e-6),
    ("qwen3", "tiny"): dict(_OTHER_TINY, head_dim=16, rms_norm_eps=1e-6),
    ("gemma", "tiny"): dict(_OTHER_TINY, head_dim=16, rms_norm_eps=1e-6),
    ("gemma2", "tiny"): dict(_OTHER_TINY, head_dim=16, rms_norm_eps=1e-6, sliding_window=8),
    ("phi", "tiny"): dict(_OTHER_TINY, hidden_size=128, partial_rotary_factor=0.5),
    ("olmo", "tiny"): dict(_OTHER_TINY, bos_token_id=1, eos_token_id=2, pad_token_id=0),
    ("granite", "tiny"): dict(_OTHER_TINY, rms_norm_eps=1e-6, residual_multiplier=0.5,
                              attention_multiplier=0.2, logits_scaling=2.0,
                              embedding_multiplier=3.0),
    ("phi3", "tiny"): dict(_OTHER_TINY, rms_norm_eps=1e-6, pad_token_id=0),
    ("stablelm", "tiny"): dict(_OTHER_TINY, partial_rotary_factor=0.5),
    ("starcoder2", "tiny"): dict(_OTHER_TINY),
    ("cohere", "tiny"): dict(_OTHER_TINY),
    ("falcon", "tiny"): dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_kv_heads=2,
                             new_decoder_architecture=True),
    # A vocabulary big enough that a prompt's whole logits outweigh everything else a run
    # holds (tests/python/test_more_architectures.py: the soft-capped LM head's last row).
    ("gemma2", "vocab32k"): dict(_OTHER_TINY, vocab_size=32768, head_dim=16, rms_norm_eps=1e-6,
                                 sliding_window=8),
    # One sliding-window layer of 8 keys, one global.
    ("gemma3_text", "tiny"): dict(_OTHER_TINY, head_dim=16, rms_norm_eps=1e-6, sliding_window=8,
                                  layer_types=["sliding_attention", "full_attention"]),
    # A window longer than prepare's logits check runs (tests/python/test_prepare_paged.py).
    ("gemma3_text", "window100"): dict(_OTHER_TINY, head_dim=16, rms_norm_eps=1e-6,
                                       sliding_window=100,
                                       layer_types=["sliding_attention", "full_attention"]),
})

# Real sizes of more architectures (perf/bench_real_decode.py): the shapes of Qwen3-0.6B
# (per-head q/k norms, head size 128 beside a hidden size of 1024) and Gemma-3-270M (a
# 262144-token vocabulary, one KV head of 256, five sliding-window layers to one global).
CONFIGS.update({
    ("qwen3", "qwen3_06b"): dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                 num_hidden_layers=28, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128,
                                 max_position_embeddings=40960, rms_norm_eps=1e-6,
                                 rope_theta=1000000.0, tie_word_embeddings=True),
    ("qwen3", "qwen3_06b_2l"): dict(vocab_size=151936, hidden_size=1024,
                                    intermediate_size=3072, num_hidden_layers=2,
                                    num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                    max_position_embeddings=40960, rms_norm_eps=1e-6,
                                    rope_theta=1000000.0, tie_word_embeddings=True),
    # Gemma-2-2B's widths with 8 of its 26 layers (all 26 are 10.5 GB of FLOAT weights, too
    # much for two engines side by side here): soft-capped scores, a 4096-token window on
    # every other layer, a 256000-token vocabulary.
    ("gemma2", "gemma2_2b_8l"): dict(vocab_size=256000, hidden_size=2304,
                                     intermediate_size=9216, num_hidden_layers=8,
                                     num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                     query_pre_attn_scalar=256, sliding_window=4096,
                                     attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                     max_position_embeddings=8192, rms_norm_eps=1e-6,
                                     rope_theta=10000.0, tie_word_embeddings=True),
    ("gemma3_text", "gemma3_270m"): dict(vocab_size=262144, hidden_size=640,
                                         intermediate_size=2048, num_hidden_layers=18,
                                         num_attention_heads=4, num_key_value_heads=1,
                                         head_dim=256, max_position_embeddings=32768,
                                         sliding_window=512, query_pre_attn_scalar=256,
                                         rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                         rms_norm_eps=1e-6, tie_word_embeddings=True),
})


def _config(arch: str, size: str) -> dict:
    """A copy of the named config: transformers writes into the dicts it is given (rope
    parameters), which would change the export's cache key between two calls."""
    return copy.deepcopy(CONFIGS[(arch, size)])


def build(arch: str, size: str = "tiny"):
    """The transformers model for a named config, seeded random weights, eval mode."""
    import torch

    torch.manual_seed(0)
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        return LlamaForCausalLM(LlamaConfig(**_config(arch, size))).eval()
    if arch == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        return Qwen2ForCausalLM(Qwen2Config(**_config(arch, size))).eval()
    if arch == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        return GPT2LMHeadModel(GPT2Config(**_config(arch, size))).eval()
    if arch in OTHER_ARCHS:
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.for_model(arch, **_config(arch, size))
        # Eager attention: the reference the tests compare with, and what the exporter traces.
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():  # random (not zero) biases and norm weights: their paths count
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.1)
                elif "norm" in name:
                    p.uniform_(0.5, 1.5)
        return model
    raise ValueError(f"unknown architecture {arch!r}")


def tiny_llama():
    return build("llama")


def tiny_gpt2():
    return build("gpt2")


def cache_shape(arch: str, size: str = "tiny") -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of the KV cache of a named config."""
    c = CONFIGS[(arch, size)]
    if arch == "gpt2":
        return c["n_layer"], c["n_head"], c["n_embd"] // c["n_head"]
    return (c["num_hidden_layers"], c.get("num_key_value_heads", c.get("num_kv_heads")),
            c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]))


def vocab_size(arch: str, size: str = "tiny") -> int:
    return CONFIGS[(arch, size)]["vocab_size"]


def cache_names(layers: int) -> list[tuple[str, str]]:
    """(past input, present output) name pairs, keys then values, layer by layer."""
    pairs = []
    for i in range(layers):
        for kind in ("key", "value"):
            pairs.append((f"past_key_values.{i}.{kind}", f"present.{i}.{kind}"))
    return pairs


def empty_cache(arch: str, batch: int = 1, size: str = "tiny") -> dict:
    """Caches of an empty prefix: FLOAT [batch, kv_heads, 0, head_dim] per past input."""
    import numpy as np

    layers, kv_heads, head_dim = cache_shape(arch, size)
    return {past: np.zeros((batch, kv_heads, 0, head_dim), np.float32)
            for past, _ in cache_names(layers)}


def add_cache_bindings(model, layers: int) -> None:
    """Binds every past_key_values.N.* input to its present.N.* output, by name (the
    runtime never guesses bindings)."""
    for past, present in cache_names(layers):
        binding = model.graph.persistent_bindings.add()
        binding.input_name = past
        binding.output_name = present


def _logits_only(model):
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids=input_ids, use_cache=False).logits

    return LogitsOnly(model)


def _with_cache(model, layers: int):
    """Flat tensors in and out: the cache is rebuilt as a DynamicCache inside forward, so the
    exporter sees plain tensors (no pytree registration of cache classes needed)."""
    import torch
    from transformers import DynamicCache

    class WithCache(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids, past):
            cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1])
                                                 for i in range(layers)])
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return WithCache(model)


def export_torchscript(model, path: str) -> None:
    """The cache export as Hugging Face Optimum writes it (and most decoders on the Hub):
    torch's TorchScript exporter (dynamo=False), opset 17, dynamic axes by name."""
    import torch

    config = model.config
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = (getattr(config, "num_key_value_heads", None)
                or getattr(config, "num_kv_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    names = cache_names(layers)
    dynamic = {"input_ids": {0: "batch_size", 1: "sequence_length"},
               "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
               "position_ids": {0: "batch_size", 1: "sequence_length"},
               "logits": {0: "batch_size", 1: "sequence_length"}}
    for past, present in names:
        dynamic[past] = {0: "batch_size", 2: "past_sequence_length"}
        dynamic[present] = {0: "batch_size", 2: "total_sequence_length"}
    batch, seq, past_len = 2, 3, 4
    args = (torch.randint(0, config.vocab_size, (batch, seq)),
            torch.ones(batch, past_len + seq, dtype=torch.int64),
            torch.arange(past_len, past_len + seq).expand(batch, seq).contiguous(),
            tuple(torch.randn(batch, kv_heads, past_len, head_dim) for _ in range(2 * layers)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # eval(): the exporter restores the wrapper's training flag afterwards, recursively.
        torch.onnx.export(_with_cache(model, layers).eval(), args, path, dynamo=False,
                          opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids"]
                          + [p for p, _ in names],
                          output_names=["logits"] + [q for _, q in names],
                          dynamic_axes=dynamic)
    model.eval()


def export(model, path: str, with_cache: bool = False) -> None:
    import torch

    batch, seq, past_len = 2, 3, 4  # > 1 each: the exporter keeps these dimensions dynamic
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not with_cache:
            torch.onnx.export(_logits_only(model), (ids,), path, input_names=["input_ids"],
                              output_names=["logits"],
                              dynamic_shapes=({0: "batch", 1: "seq"},),
                              opset_version=18, dynamo=True, verbose=False)
            return
        config = model.config
        layers = config.num_hidden_layers
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = (getattr(config, "head_dim", None)
                    or config.hidden_size // config.num_attention_heads)
        mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
        positions = torch.arange(past_len, past_len + seq).expand(batch, seq).contiguous()
        past = tuple(torch.randn(batch, kv_heads, past_len, head_dim) for _ in range(2 * layers))
        names = cache_names(layers)
        torch.onnx.export(
            _with_cache(model, layers), (ids, mask, positions, past), path,
            input_names=["input_ids", "attention_mask", "position_ids"] + [p for p, _ in names],
            output_names=["logits"] + [p for _, p in names],
            dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch", 1: "total"},
                            {0: "batch", 1: "seq"},
                            tuple({0: "batch", 2: "past"} for _ in range(2 * layers))),
            opset_version=18, dynamo=True, verbose=False)


def single_use_caches(proto, kv_heads: int, head_dim: int) -> int:
    """Rewrites the `Shape`/`Size` reads of the past_key_values.N.* inputs so that every cache
    input has exactly one use (its Concat with the new keys/values), as a persistent binding
    requires: onnx_light.prepare.make_single_use, the product's rewrite (batch from
    input_ids' first dimension, past = attention_mask's length - input_ids' length, kv_heads
    and head_dim from the declaration or these arguments). Works on an `onnx` ModelProto;
    returns the number of nodes rewritten."""
    from onnx_light import prepare

    caches = [i.name for i in proto.graph.input if i.name.startswith("past_key_values.")]
    return len(prepare.make_single_use(proto, caches, known_dims={1: kv_heads, 3: head_dim}))


def _key(arch: str, size: str, with_cache: bool, raw: bool = False,
         exporter: str = "dynamo") -> str:
    from importlib.metadata import version  # importing torch here would cost seconds

    # The code that shapes the exported graph, not the whole file: editing the tests' helpers
    # here does not force a re-export.
    functions = [export, _with_cache] if with_cache else [export, _logits_only]
    if exporter == "torchscript":
        functions = [export_torchscript, _with_cache]
    if with_cache and not raw:
        from onnx_light import prepare

        functions += [single_use_caches, prepare.make_single_use]
    source = "".join(inspect.getsource(f) for f in functions)
    blob = json.dumps([arch, size, with_cache] + (["raw"] if raw else [])
                      + ([exporter] if exporter != "dynamo" else [])
                      + [CONFIGS[(arch, size)], version("torch"), version("transformers"),
                         source], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def ensure(arch: str, with_cache: bool = False, size: str = "tiny",
           out_dir: str = MODEL_DIR, raw: bool = False, exporter: str = "dynamo") -> str:
    """Path of the export for (arch, size, with_cache), exporting it first if not cached.
    raw=True (with_cache only): the exporter's file as written, before single_use_caches
    (the input of `python -m onnx_light prepare`). exporter: "dynamo" (`export`) or
    "torchscript" (`export_torchscript`, cache exports only)."""
    if raw and not with_cache:
        raise ValueError("raw applies to cache exports only")
    if exporter not in ("dynamo", "torchscript") or (exporter == "torchscript" and not with_cache):
        raise ValueError(f"no {exporter!r} export with_cache={with_cache}")
    kind = ("_kv_raw" if raw else "_kv") if with_cache else ""
    kind += "_ts" if exporter == "torchscript" else ""
    name = f"{size}_{arch}{kind}-{_key(arch, size, with_cache, raw, exporter)}.onnx"
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        os.makedirs(out_dir, exist_ok=True)
        tmp = os.path.join(out_dir, f".tmp-{os.getpid()}-{name}")
        if exporter == "torchscript":
            export_torchscript(build(arch, size), tmp)
        else:
            export(build(arch, size), tmp, with_cache)
        # The weights sit next to the graph as external data named after the temporary file:
        # re-save under the final name so the graph refers to the right data file.
        import onnx

        proto = onnx.load(tmp)
        if with_cache and not raw:
            _, kv_heads, head_dim = cache_shape(arch, size)
            single_use_caches(proto, kv_heads, head_dim)
        staged = os.path.join(out_dir, f".staged-{os.getpid()}-{name}")
        onnx.save(proto, staged, save_as_external_data=True, location=name + ".data")
        del proto
        os.remove(tmp)
        if os.path.exists(tmp + ".data"):
            os.remove(tmp + ".data")
        try:
            if with_cache and not raw:
                onnx.checker.check_model(staged)  # by path: exports past 2 GB
        except Exception:
            os.remove(staged)
            os.remove(os.path.join(out_dir, name + ".data"))
            raise
        os.replace(staged, path)
    return path


def main(out_dir: str = MODEL_DIR) -> None:
    for arch in ("llama", "gpt2"):
        for with_cache in (False, True):
            print(ensure(arch, with_cache, out_dir=out_dir))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else MODEL_DIR)
