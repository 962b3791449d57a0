"""Builds tiny Llama- and GPT-2-architecture decoders with transformers from a config
(random weights, no download) and exports them with torch.onnx.export.

Used by the executor conformance tests and the perf benchmarks:
    python tests/python/models/export_hf.py OUT_DIR
writes OUT_DIR/tiny_llama.onnx and OUT_DIR/tiny_gpt2.onnx (without KV cache inputs: a
full-prefix model, inputs input_ids [batch, seq] -> logits [batch, seq, vocab]).
"""
from __future__ import annotations

import os
import sys
import warnings


def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def tiny_gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=256, n_embd=64, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config).eval()


class _LogitsOnly:
    """Wraps a causal LM so the exported graph is input_ids -> logits (no cache)."""

    def __new__(cls, model):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids):
                return self.inner(input_ids=input_ids, use_cache=False).logits

        return Wrapper(model)


def export(model, path: str) -> None:
    import torch

    ids = torch.randint(0, 128, (2, 8), dtype=torch.int64)  # batch 2: keep batch dynamic
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_LogitsOnly(model), (ids,), path, input_names=["input_ids"],
                          output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"}},
                          opset_version=18, dynamo=True)


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    export(tiny_llama(), os.path.join(out_dir, "tiny_llama.onnx"))
    export(tiny_gpt2(), os.path.join(out_dir, "tiny_gpt2.onnx"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/models")
