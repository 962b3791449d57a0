"""A model given as its folder (the onnxruntime-genai builder's output, a Hub download):
the one .onnx file in it."""

from __future__ import annotations

import os


def model_file(path: str) -> str:
    """`path`, or the one .onnx file of the directory `path` (a model folder such as the
    onnxruntime-genai builder's); a folder with none or several is refused, naming them."""
    if not os.path.isdir(path):
        return path
    found = sorted(f for f in os.listdir(path) if f.endswith(".onnx"))
    if len(found) == 1:
        return os.path.join(path, found[0])
    if not found:
        raise ValueError(f"'{path}' is a directory with no .onnx file in it")
    raise ValueError(f"'{path}' is a directory with several models ({', '.join(found)}): "
                     "pass one of them")
