"""The ONNX text format printer: the inverse of onnx_light.onnx_lib.parser.

to_text accepts onnx_light.onnx or onnx package messages (ModelProto, GraphProto,
FunctionProto, NodeProto). Sparse tensor attributes have no text form and raise
NotImplementedError; the onnx-light extensions (persistent bindings, paged-cache and encoded
initializers, struct types, shared parameters) have none either and raise ValueError naming
them, rather than being dropped. Doc strings other than the model's are not printed.
"""
from onnx_light.onnx_py._onnxpykernels import parser as _native


def to_text(proto) -> str:
    """The ONNX text of a model, graph, function or node."""
    return _native.to_text(proto)


__all__ = ["to_text"]
