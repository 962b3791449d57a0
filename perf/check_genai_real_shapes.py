"""Correctness (not speed) on the real shapes, to run by hand: the onnxruntime-genai
builder's fp32 and int4 CPU builds of random-weight SmolLM2-135M and Qwen2.5-0.5B checkpoints
(tests/python/models/genai_builder.py, cached in build/models/genai; built on first use),
prepared with `prepare --bind auto`, give onnxruntime's greedy tokens on the same file and
last-position logits within 1e-4 (fp32) / within onnxruntime's own int4 error against its
level-0 (dequantized float) run (int4), at every step (tests/python/models/genai_compare.py;
CI runs the same comparison on the tiny and 2-layer builds).

    PYTHONPATH=python python perf/check_genai_real_shapes.py [--shapes smollm2 qwen05]
        [--precisions fp32 int4] [--prompt 6] [--new-tokens 8] [--seed 7]

Prints one line per build; exits 1 if any differs. With random weights the logits of the
larger vocabulary are often near-tied; after a near tie (`genai_compare`) the two runtimes
may rightly pick different tokens, so tokens are compared up to the first one."""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from models import genai_builder, genai_compare  # noqa: E402

ARCH = {"smollm2": "llama", "qwen05": "qwen2"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(ARCH), default=["smollm2", "qwen05"])
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "int4"],
                        default=["fp32", "int4"])
    parser.add_argument("--prompt", type=int, default=6, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7, help="of the random prompt")
    args = parser.parse_args(argv)
    failed = False
    for shape in args.shapes:
        for precision in args.precisions:
            start = time.perf_counter()
            path = genai_builder.ensure(ARCH[shape], precision, shape)
            built = time.perf_counter()
            result = genai_compare.compare(path, args.prompt, args.new_tokens, args.seed)
            print(f"{shape} {result.format()} [build {built - start:.0f} s, "
                  f"compare {time.perf_counter() - built:.0f} s]", flush=True)
            failed |= not (result.same_tokens and result.within)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
