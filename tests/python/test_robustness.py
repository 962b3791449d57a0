"""No input crashes the process (issue 16): each crash class seen by mutation fuzzing, as a
regression test. Each case runs in a child interpreter, since a regression would otherwise
kill pytest with SIGSEGV; the child prints the exception it caught, and the test asserts
the process survived, the exception type and that the message names the node, input or size.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "text_parser"

PRELUDE = """
import numpy as np, onnx
from onnx import helper, TensorProto as TP
from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime

def ctx(opset=18):
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(opset)))

def model_bytes(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return m.SerializeToString()

def vi(name, elem=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)

def bind(m, input_name="past", output_name="present"):
    b = m.graph.persistent_bindings.add()
    b.input_name, b.output_name = input_name, output_name

def report(fn):
    try:
        fn()
        print("NO ERROR")
    except BaseException as e:  # the type and message are what the test checks
        print("CAUGHT " + type(e).__name__ + ": " + str(e))
"""


def isolated(code: str) -> str:
    """Runs `code` in a child interpreter; returns the line it reports. Asserts it survived."""
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    lines = [l for l in proc.stdout.splitlines() if l.startswith(("CAUGHT", "NO ERROR"))]
    assert lines, proc.stdout + proc.stderr
    return lines[-1]


def expect(code: str, error: str, *fragments: str) -> str:
    line = isolated(code)
    assert line.startswith(f"CAUGHT {error}: "), line
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"
    return line


# --- element counts that overflow ---------------------------------------------------------

BIG = 2**62


def test_constant_of_shape_with_an_overflowing_shape_is_refused_naming_the_node():
    expect(f"""
    m = model_bytes([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")],
                    [vi("s", TP.INT64, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {{"s": np.array([{BIG}, 4], np.int64)}}))
    """, "ValueError", "ConstantOfShape node 'cos'", "overflows int64")


def test_expand_to_an_overflowing_shape_is_refused_naming_the_node():
    expect(f"""
    m = model_bytes([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")],
                    [vi("x", TP.FLOAT, [1, 1]), vi("s", TP.INT64, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(
        ctx(), {{"x": np.ones((1, 1), np.float32), "s": np.array([{BIG}, 8], np.int64)}}))
    """, "ValueError", "Expand node 'ex'", "overflows int64")


def test_tile_with_overflowing_repeats_is_refused_naming_the_node():
    expect(f"""
    m = model_bytes([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
                    [vi("x", TP.FLOAT, [2, 2]), vi("r", TP.INT64, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(
        ctx(), {{"x": np.ones((2, 2), np.float32), "r": np.array([{BIG}, 1], np.int64)}}))
    """, "ValueError", "Tile node 'tile'", "overflows int64")


def test_one_hot_with_an_absurd_depth_is_refused_naming_the_node():
    expect("""
    m = model_bytes([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="oh")],
                    [vi("i", TP.INT64, [3]), vi("d", TP.FLOAT, []), vi("v", TP.FLOAT, [2])],
                    [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {
        "i": np.arange(3), "d": np.array(3e38, np.float32),
        "v": np.array([0, 1], np.float32)}))
    """, "ValueError", "OneHot node 'oh'")


def test_range_with_a_huge_count_is_refused_naming_the_node():
    expect("""
    m = model_bytes([helper.make_node("Range", ["a", "b", "c"], ["y"], name="rg")],
                    [vi("a", TP.DOUBLE, []), vi("b", TP.DOUBLE, []), vi("c", TP.DOUBLE, [])],
                    [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {
        "a": np.array(0.0), "b": np.array(1e300), "c": np.array(1.0)}))
    """, "ValueError", "Range node 'rg'", "2^62")


def test_range_of_int64_extremes_is_refused_instead_of_overflowing():
    expect("""
    m = model_bytes([helper.make_node("Range", ["a", "b", "c"], ["y"], name="rg")],
                    [vi("a", TP.INT64, []), vi("b", TP.INT64, []), vi("c", TP.INT64, [])],
                    [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {
        "a": np.array(-2**63, np.int64), "b": np.array(2**63 - 1, np.int64),
        "c": np.array(1, np.int64)}))
    """, "ValueError", "Range node 'rg'", "overflows")


def test_pad_to_an_overflowing_shape_is_refused_naming_the_node():
    expect(f"""
    m = model_bytes([helper.make_node("Pad", ["x", "p"], ["y"], name="pad")],
                    [vi("x", TP.FLOAT, [1, 2]), vi("p", TP.INT64, [4])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(
        ctx(), {{"x": np.ones((1, 2), np.float32), "p": np.array([0, 0, 2**40, 2**40], np.int64)}}))
    """, "ValueError", "Pad node 'pad'", "overflows int64")


def test_an_initializer_whose_dims_overflow_does_not_pass_the_payload_check():
    expect(f"""
    w = TP(name="w", data_type=TP.FLOAT, dims=[{BIG}, 4], raw_data=b"")
    m = model_bytes([helper.make_node("Gather", ["w", "i"], ["y"], name="ga")],
                    [vi("i", TP.INT64, [1])], [vi("y")], inits=[w])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {{"i": np.array([3], np.int64)}}))
    """, "ValueError", "'w'", "overflows int64")


def test_the_printer_refuses_an_initializer_whose_dims_do_not_match_its_payload():
    expect(f"""
    import onnx_light.onnx as ol
    from onnx_light.onnx_lib import printer
    w = TP(name="w", data_type=TP.FLOAT, dims=[{2**61}], raw_data=b"12345678")
    m = model_bytes([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y")],
                    inits=[w])
    report(lambda: printer.to_text(ol.load_model(m)))
    """, "ValueError", "tensor 'w'")


# --- recursion over user-supplied structures ---------------------------------------------

def test_a_self_referential_list_feed_is_refused_instead_of_overflowing_the_stack():
    expect("""
    m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[2] x) => (float[2] y) { y = Identity(x) }')
    loop = []
    loop.append(loop)
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"x": loop}))
    """, "ValueError", "'x", "nest more than 64 levels")


def test_a_deeply_nested_dict_feed_is_refused_naming_the_input():
    expect("""
    m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[2] x) => (float[2] y) { y = Identity(x) }')
    deep = np.ones(2, np.float32)
    for _ in range(100000):
        deep = {"f": deep}
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"x": deep}))
    """, "ValueError", "'x.f.f", "nest more than 64 levels")


def test_a_self_referential_initial_value_of_a_state_is_refused():
    expect("""
    m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[2] x, float[2] past) => (float[2] y, float[2] present) '
                           '{ present = Add(x, past) y = Identity(present) }')
    bind(m)
    loop = {}
    loop["f"] = loop
    report(lambda: runtime.PersistentValueState(m, {"past": loop}))
    """, "ValueError", "'past.f.f", "nest more than 64 levels")


# --- memory limit -------------------------------------------------------------------------

def test_max_tensor_bytes_turns_a_runaway_allocation_into_an_error_naming_node_and_size():
    line = expect("""
    m = model_bytes([helper.make_node("ConstantOfShape", ["s"], ["y"], name="huge")],
                    [vi("s", TP.INT64, [2])], [vi("y")])
    options = runtime.RuntimeSessionOptions(max_tensor_bytes=1 << 20)
    assert options.max_tensor_bytes == 1 << 20
    session = runtime.RuntimeSession(m, options)
    session.run(ctx(), {"s": np.array([256, 1024], np.int64)})  # exactly 1 MiB passes
    report(lambda: session.run(ctx(), {"s": np.array([1 << 20, 1 << 10], np.int64)}))
    """, "MemoryError", "ConstantOfShape node 'huge'", "4294967296 bytes",
                  "max_tensor_bytes = 1048576")
    assert "[1048576, 1024]" in line


def test_the_default_max_tensor_bytes_refuses_an_output_larger_than_the_machine():
    expect("""
    m = model_bytes([helper.make_node("ConstantOfShape", ["s"], ["y"], name="huge")],
                    [vi("s", TP.INT64, [2])], [vi("y")])
    assert runtime.RuntimeSessionOptions().max_tensor_bytes > 0
    s = np.array([1 << 30, 1 << 10], np.int64)  # 4 TiB of FLOAT: past half of any machine
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"s": s}))
    """, "MemoryError", "ConstantOfShape node 'huge'", "max_tensor_bytes")


def test_max_tensor_bytes_must_be_a_nonnegative_int():
    expect("""
    report(lambda: runtime.RuntimeSessionOptions(max_tensor_bytes=-1))
    """, "ValueError", "max_tensor_bytes must be nonnegative")


# --- attribute types and node arity -------------------------------------------------------

def test_a_constant_whose_attribute_tag_does_not_match_is_refused_naming_node_and_attribute():
    expect("""
    node = helper.make_node("Constant", [], ["y"], name="c", value_floats=[1.0, 2.0])
    node.attribute[0].type = onnx.AttributeProto.FLOAT  # tag says FLOAT, payload is floats
    m = model_bytes([node], [], [vi("y")])
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {}))
    """, "ValueError", "Constant node 'c'", "'value_floats'", "FLOAT")


def test_a_node_with_more_inputs_than_its_schema_is_refused_naming_it():
    expect("""
    m = model_bytes([helper.make_node("Relu", ["x", "x"], ["y"], name="r")],
                    [vi("x", TP.FLOAT, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m))
    """, "ValueError", "Relu node 'r'", "2 inputs", "at most 1")


def test_a_node_with_more_outputs_than_its_schema_is_refused_naming_it():
    expect("""
    m = model_bytes([helper.make_node("Add", ["x", "x"], ["y", "z"], name="a")],
                    [vi("x", TP.FLOAT, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m))
    """, "ValueError", "Add node 'a'", "2 outputs", "at most 1")


def test_a_node_with_fewer_inputs_than_its_schema_is_refused_naming_it():
    """A libFuzzer-style finding (tests/fuzz/fuzz_models.py, semantic target): a kernel read
    the missing input's name while building its error, past the end of the node's inputs."""
    expect("""
    m = model_bytes([helper.make_node("OneHot", ["i"], ["y"], name="hot")],
                    [vi("i", TP.INT64, [3])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m))
    """, "ValueError", "OneHot node 'hot'", "1 inputs", "OneHot-11 takes at least 3")


def test_a_graph_attribute_on_an_operator_without_one_is_refused_naming_it():
    """An If mutated into Add kept its branches: their captures became extra inputs of the
    Add, which its kernel read as its second operand (tests/fuzz/fuzz_models.py)."""
    expect("""
    branch = helper.make_graph([helper.make_node("Identity", ["t"], ["z"])], "b", [],
                               [vi("z", TP.FLOAT, [2])])
    m = model_bytes([helper.make_node("Neg", ["x"], ["t"]),
                     helper.make_node("Add", ["x", "x"], ["y"], name="add",
                                      then_branch=branch)],
                    [vi("x", TP.FLOAT, [2])], [vi("y")])
    report(lambda: runtime.RuntimeSession(m))
    """, "ValueError", "Add node 'add'", "attribute 'then_branch' is a graph",
         "Add does not take")


# --- the model edited after a session was built -------------------------------------------

EDIT_SETUP = """
def add_model():
    return parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                              'g (float[2] x) => (float[2] y) <float[2] w = {1, 2}> '
                              '{ y = Add(x, w) }')
m = add_model()
x = np.ones(2, np.float32)
"""


@pytest.mark.parametrize("edit", ["m.ParseFromString(other.SerializeToString())",
                                  "m.CopyFrom(other)", "m.graph.initializer[0].raw_data = b''",
                                  "m.Clear()"])
def test_a_run_after_the_model_was_edited_is_refused(edit):
    expect(EDIT_SETUP + f"""
session = runtime.RuntimeSession(m)
session.run(ctx(), {{"x": x}})
other = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[3] x) => (float[3] y) {{ y = Neg(x) }}')
{edit}
report(lambda: session.run(ctx(), {{"x": x}}))
""", "RuntimeError", "RuntimeSession.run", "model was changed after this session")


def test_a_state_run_after_the_model_was_edited_is_refused():
    expect(EDIT_SETUP + """
m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                       'g (float[2] x, float[2] past) => (float[2] y, float[2] present) '
                       '{ present = Add(x, past) y = Identity(present) }')
bind(m)
state = runtime.PersistentValueState(m, {"past": np.zeros(2, np.float32)})
state.run(ctx(), {"x": x})
m.CopyFrom(add_model())
report(lambda: state.run(ctx(), {"x": x}))
""", "RuntimeError", "PersistentValueState.run", "model was changed")


def test_a_new_session_of_the_edited_model_runs_it():
    line = isolated(EDIT_SETUP + """
runtime.RuntimeSession(m).run(ctx(), {"x": x})
m.graph.initializer[0].CopyFrom(add_model().graph.initializer[0])
m.graph.node[0].op_type = "Mul"
y = np.from_dlpack(runtime.RuntimeSession(m).run(ctx(), {"x": x})["y"])
assert y.tolist() == [1.0, 2.0], y
report(lambda: None)
""")
    assert line == "NO ERROR"


# --- option values that cannot be right ---------------------------------------------------

def test_an_attention_mask_name_aliasing_the_position_input_is_refused():
    expect("""
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
    c = TinyDecoderConfig()
    model = build_tiny_decoder(config=c)
    feeds = {"input_ids": np.array([[1, 2, 3]], np.int64), **empty_cache(c)}
    options = runtime.GenerationOptions(max_new_tokens=4)
    options.attention_mask_name = "position_ids"
    report(lambda: runtime.generate(model, ctx(23), feeds, options))
    """, "ValueError", "attention_mask_name and position_ids_name both name 'position_ids'")


def test_generation_refuses_to_run_past_the_models_position_limit():
    expect("""
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
    c = TinyDecoderConfig()
    model = build_tiny_decoder(config=c)
    feeds = {"input_ids": np.array([[1, 2, 3]], np.int64), **empty_cache(c)}
    report(lambda: runtime.generate(model, ctx(23), feeds,
                                    runtime.GenerationOptions(max_new_tokens=600)))
    """, "ValueError", "position 512 is past the model's limit of 512 positions",
           "'embed_positions'")


# --- error messages -----------------------------------------------------------------------

def test_a_node_name_with_invalid_utf8_gives_the_value_error_naming_the_node():
    line = expect("""
    m = model_bytes([helper.make_node("Reshape", ["x", "s"], ["y"], name="NAMEXX")],
                    [vi("x", TP.FLOAT, [2]), vi("s", TP.INT64, [1])], [vi("y")])
    m = m.replace(b"NAMEXX", b"NA\\xff\\xfeXX")
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"x": np.ones(2, np.float32),
                                                          "s": np.array([3], np.int64)}))
    """, "ValueError", "Reshape node 'NA\\xff\\xfeXX'", "cannot reshape")
    assert "UnicodeDecodeError" not in line


def test_a_nul_byte_in_an_op_type_does_not_cut_the_message_short():
    expect("""
    m = model_bytes([helper.make_node("Abcdef", ["x"], ["y"], name="n1")],
                    [vi("x", TP.FLOAT, [2])], [vi("y")])
    m = m.replace(b"Abcdef", b"Ab\\x00def")
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"x": np.ones(2, np.float32)}))
    """, "NotImplementedError", "Ab\\x00def", "'n1'")


def test_argument_errors_name_the_argument_and_the_expected_type():
    expect("""
    m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[2] x, float[2] past) => (float[2] y, float[2] present) '
                           '{ present = Add(x, past) y = Identity(present) }')
    bind(m)
    state = runtime.PersistentValueState(m, {"past": np.zeros(2, np.float32)})
    report(lambda: state.run("not a context", {"x": np.ones(2, np.float32)}))
    """, "TypeError", "context must be a runtime.RuntimeContext, got str")
    expect("""
    m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                           'g (float[2] x) => (float[2] y) { y = Identity(x) }')
    report(lambda: runtime.RuntimeSession(m).run(ctx(), {"x": np.ones(2, np.float32)},
                                                 output_names=[1, 2]))
    """, "TypeError", "output_names must be a list of str, got list")


def test_a_self_referential_dict_of_fields_given_to_a_proto_is_refused():
    expect("""
    import onnx_light.onnx as ol
    g = {"name": "g", "node": []}
    g["node"].append({"op_type": "If", "attribute": [{"name": "then_branch", "g": g}]})
    report(lambda: ol.GraphProto(**g))
    """, "ValueError", "nest more than 100 levels")


def test_a_loop_with_a_huge_trip_count_and_scan_outputs_fails_at_max_tensor_bytes():
    expect(f"""
    import onnx_light.onnx as ol
    m = ol.load_model({str(DATA / "loop_body.pb")!r})
    m.graph.node[1].name = "loop"
    session = runtime.RuntimeSession(m, runtime.RuntimeSessionOptions(max_tensor_bytes=1 << 20))
    report(lambda: session.run(ctx(), {{"n": np.array({BIG}, np.int64),
                                        "init": np.ones(2, np.float32)}}))
    """, "MemoryError", "Loop node 'loop'", "scan outputs of", "max_tensor_bytes = 1048576")


def test_printing_a_model_with_invalid_utf8_names_gives_a_value_error_locating_them():
    line = expect("""
    import onnx_light.onnx as ol
    from onnx_light.onnx_lib import printer
    m = model_bytes([helper.make_node("Relu", ["x"], ["y"], name="NAMEXX")],
                    [vi("x", TP.FLOAT, [2])], [vi("y")])
    m = ol.load_model(m.replace(b"NAMEXX", b"NA\\xff\\xfeXX"))
    report(lambda: printer.to_text(m))
    """, "ValueError", "not valid UTF-8", "NA\\xff\\xfeXX")
    assert "UnicodeDecodeError" not in line


def test_a_mul_with_one_input_is_refused_before_the_fusions_read_it():
    """The plan's pattern matchers (RMSNorm, SiLU, attention) read both inputs of a Mul; a
    malformed Mul with one input is refused when the session is built, naming the node,
    before they run (a libFuzzer finding: tests/fuzz/regressions/model/
    fusion-mul-with-one-input)."""
    expect("""
        m = model_bytes([helper.make_node("Mul", ["x"], ["y"], name="lonely"),
                         helper.make_node("Mul", ["y", "w"], ["z"], name="scale")],
                        [vi("x", shape=[2, 3])], [vi("z", shape=[2, 3])],
                        [helper.make_tensor("w", TP.FLOAT, [3], [1.0, 2.0, 3.0])])
        from onnx_light import onnx as ol
        model = ol.ModelProto.FromString(m)
        report(lambda: runtime.RuntimeSession(model).run(ctx(),
                                                         {"x": np.ones((2, 3), np.float32)}))
    """, "ValueError", "Mul node 'lonely'", "takes at least 2")
