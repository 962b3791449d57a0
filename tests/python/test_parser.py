"""onnx_light.onnx_lib.parser/printer: the ONNX text format, compared with onnx.parser."""
import onnx
import onnx.parser
import pytest

import onnx_light
from onnx_light import onnx as ol
from onnx_light.onnx_lib import parser, printer

SPEC_MODEL = ('<ir_version: 10, opset_import: ["" : 18]>'
              "accumulate (float[2] delta, float[2] past) => (float[2] present)"
              "{ present = Add(delta, past) }")

MODELS = [
    SPEC_MODEL,
    """
    <ir_version: 8, opset_import: ["" : 18, "com.example" : 1], producer_name: "test">
    agraph (float[N, 128] X, float[128, 10] W, float[10] B) => (float[N, 10] C)
    <float[10] bias_copy>
    {
        T = MatMul(X, W)
        S = Add(T, B)
        C = Softmax <axis: int = -1> (S)
        bias_copy = Identity(B)
    }
    """,
    """
    <ir_version: 9, opset_import: ["" : 18]>
    consts (int64[2] shape) => (float[2, 3] out)
    <float[3] w = {1.0, 2.5, -3.0}, int64[1] axes = {0}>
    {
        z = ConstantOfShape <value: tensor = float[1] {0.5}> (shape)
        u = Unsqueeze(w, axes)
        out = Add(z, u)
    }
    """,
    """
    <ir_version: 9, opset_import: ["" : 18]>
    branch (bool cond, float[4] x) => (float[4] y)
    {
        y = If(cond) <
            then_branch: graph = then_g () => (float[4] t) { t = Relu(x) },
            else_branch: graph = else_g () => (float[4] e) { e = Neg(x) }
        >
    }
    """,
    """
    <ir_version: 9, opset_import: ["" : 18, "local" : 1]>
    main (float[3] x) => (float[3] y)
    {
        y = local.Double(x)
    }
    <domain: "local", opset_import: ["" : 18]>
    Double (a) => (b)
    {
        b = Add(a, a)
    }
    """,
    """
    <ir_version: 9, opset_import: ["" : 18]>
    attrs (float[2] x, seq(float[2]) s, string[1] names) => (float[2] y)
    {
        y = Clip <min: float = -1.0, max: float = 1.0, strs: strings = ["a", "b"],
                  ints: ints = [1, 2, 3]> (x)
    }
    """,
]


def test_spec_example_parses_and_takes_a_persistent_binding():
    model = parser.parse_model(SPEC_MODEL)
    assert isinstance(model, ol.ModelProto)
    binding = model.graph.persistent_bindings.add()
    binding.input_name = "past"
    binding.output_name = "present"
    assert model.ir_version == 10
    assert model.opset_import[0].version == 18
    assert [i.name for i in model.graph.input] == ["delta", "past"]
    assert model.graph.node[0].op_type == "Add"
    again = ol.ModelProto.FromString(model.SerializeToString())
    assert again.graph.persistent_bindings[0].input_name == "past"
    assert again.graph.persistent_bindings[0].output_name == "present"


@pytest.mark.parametrize("text", MODELS)
def test_parse_model_equals_onnx_parser(text):
    ours = parser.parse_model(text)
    theirs = onnx.parser.parse_model(text)
    assert onnx.load_from_string(ours.SerializeToString()) == theirs


def test_parse_graph_function_and_node_equal_onnx_parser():
    graph = "g (float[2] x) => (float[2] y) { y = Relu(x) }"
    assert (onnx.GraphProto.FromString(parser.parse_graph(graph).SerializeToString())
            == onnx.parser.parse_graph(graph))
    function = """
        <domain: "local", opset_import: ["" : 18]>
        Square <alpha> (x) => (y) { y = Mul(x, x) }
    """
    assert (onnx.FunctionProto.FromString(parser.parse_function(function).SerializeToString())
            == onnx.parser.parse_function(function))
    node = "y = Transpose <perm: ints = [1, 0]> (x)"
    assert (onnx.NodeProto.FromString(parser.parse_node(node).SerializeToString())
            == onnx.parser.parse_node(node))


def test_printed_text_parses_back_to_an_equal_model():
    for text in MODELS:
        model = parser.parse_model(text)
        assert parser.parse_model(printer.to_text(model)) == model
    # Messages of the onnx package print too.
    theirs = onnx.parser.parse_model(MODELS[1])
    assert parser.parse_model(printer.to_text(theirs)) == ol.from_onnx(theirs)


def test_syntax_errors_raise_parse_error_with_line_and_column():
    with pytest.raises(onnx_light.ParseError) as info:
        parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>\n'
                           "g (float[2] x) => (float[2] y)\n"
                           "{ y = Relu(x }")
    error = info.value
    assert isinstance(error, ValueError)
    assert error.line == 3
    assert error.column >= 1
    assert str(error).startswith("line 3, column ")
    with pytest.raises(ValueError):
        parser.parse_node("y = (x)")
    with pytest.raises(TypeError):
        parser.parse_model(42)
