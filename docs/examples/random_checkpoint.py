"""A Hugging Face checkpoint with random weights in the shape of a real decoder, for trying the
export -> prepare -> generate path with no download (docs/real-models.md):

    python docs/examples/random_checkpoint.py OUT_DIR [--shape smollm2|qwen05|tiny] [--layers N]

writes OUT_DIR/config.json, model.safetensors (save_pretrained) and a byte-level BPE
tokenizer trained in-process on a short text (tokenizer.json, tokenizer_config.json). With a
real checkpoint (a hub download or your own fine-tune), skip this step.
"""
from __future__ import annotations

import argparse

SHAPES = {
    # SmolLM2-135M (Llama architecture) and Qwen2.5-0.5B (Qwen2), as published.
    "smollm2": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                              num_hidden_layers=30, num_attention_heads=9,
                              num_key_value_heads=3, max_position_embeddings=2048,
                              rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)),
    "qwen05": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                             num_hidden_layers=24, num_attention_heads=14,
                             num_key_value_heads=2, max_position_embeddings=2048,
                             rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)),
    "tiny": ("llama", dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=256, rms_norm_eps=1e-6,
                           tie_word_embeddings=True)),
}
TEXT = "the quick brown fox jumps over the lazy dog. " * 4


def write_checkpoint(out: str, arch: str, config: dict, seed: int = 0) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    torch.manual_seed(seed)
    # Any architecture transformers knows by its model_type ("llama", "qwen2", "mistral", ...).
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(arch, **config))
    with torch.no_grad():  # random (not zero) attention biases, so Qwen2's bias path is built
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    model.save_pretrained(out)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokenizer.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"]))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>",
                                         eos_token="</s>", unk_token="<unk>").save_pretrained(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--layers", type=int, help="override the number of layers")
    args = parser.parse_args(argv)
    arch, config = SHAPES[args.shape]
    if args.layers:
        config = dict(config, num_hidden_layers=args.layers)
    write_checkpoint(args.out, arch, config)
    print(f"wrote a random-weight {args.shape} checkpoint ({arch}, "
          f"{config['num_hidden_layers']} layers) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
