"""The ONNX text format parser (the grammar of onnx.parser), native and protobuf-free.

    from onnx_light.onnx_lib import parser
    model = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                               "agraph (float[2] x) => (float[2] y) { y = Relu(x) }")

Results are onnx_light.onnx messages. Malformed text raises onnx_light.ParseError, a
ValueError whose .line and .column (1-based) locate the offending token.
"""
from onnx_light.onnx_py._onnxpykernels import ParseError
from onnx_light.onnx_py._onnxpykernels import parser as _native


def parse_model(model_text):
    """Parses `<header> graph function*` into an onnx_light.onnx.ModelProto."""
    return _native.parse_model(model_text)


def parse_graph(graph_text):
    """Parses `name (inputs) => (outputs) <initializers> { nodes }` into a GraphProto."""
    return _native.parse_graph(graph_text)


def parse_function(function_text):
    """Parses `<header> name <attributes> (inputs) => (outputs) { nodes }` into a FunctionProto."""
    return _native.parse_function(function_text)


def parse_node(node_text):
    """Parses `outputs = domain.Op <attributes> (inputs)` into a NodeProto."""
    return _native.parse_node(node_text)


__all__ = ["ParseError", "parse_model", "parse_graph", "parse_function", "parse_node"]
