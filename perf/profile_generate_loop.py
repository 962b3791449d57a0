"""A steady generate loop on the demo decoder, for profilers (perf record -g) and quick A/B
timing of per-token overhead: 60 calls of runtime.generate, 64 new tokens each, after the
demo's prompt. Prints the mean microseconds per generated token (prompt and plan
compilation included, so compare only runs of this same script).

    PYTHONPATH=python .venv/bin/python perf/profile_generate_loop.py [--calls 60]
"""
import argparse
import time

import numpy as np

from onnx_light.demo import encode
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx_py._onnxpykernels import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    model = build_tiny_decoder()
    prompt = encode("onnx-light generates ")
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    options = runtime.GenerationOptions(max_new_tokens=args.tokens)
    feeds = {"input_ids": np.array([prompt], np.int64), **empty_cache(TinyDecoderConfig())}
    start = time.perf_counter()
    for _ in range(args.calls):
        runtime.generate(model, context, feeds, options)
    elapsed = time.perf_counter() - start
    print(f"{elapsed / args.calls / args.tokens * 1e6:.1f} us/token "
          f"(prompt and plan compilation included)")


if __name__ == "__main__":
    main()
