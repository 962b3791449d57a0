"""runtime.GraphBuilder, runtime.export_standard_onnx and the legacy graph edits (spec
"Structured feedback", GraphBuilder paragraph, and "Serialized cache values"): bindings and
cache initializers survive import/export byte for byte, rewrites keep them valid, direct edits
that break them fail at export naming the binding, and nothing that would lose them (standard
ONNX, the text printer, extraction, prefixing, merging) silently drops them."""
import numpy
import pytest

from onnx_light import onnx as ol
from onnx_light.onnx_lib import parser, printer
from onnx_light.onnx_py._onnxpykernels import runtime
from test_paged_cache_state import cache_proto, feeds, make_context, paged_model

FEEDBACK = ('<ir_version: 10, opset_import: ["" : 18]>'
            "feedback (float[2] delta, float[2] past) => (float[2] present, float[2] y)"
            "{ [add] present = Add(delta, past) [neg] y = Neg(present) }")


def feedback_model():
    model = parser.parse_model(FEEDBACK)
    model.graph.persistent_bindings.add(input_name="past", output_name="present")
    return model


def plain_model():
    return parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>'
                              "g (float[2] x) => (float[2] y) <float[2] w = {1, 2}> "
                              "{ [r] y = Add(x, w) }")


def test_import_export_preserves_bindings_and_cache_initializers_byte_for_byte():
    model = paged_model()
    exported = runtime.GraphBuilder(model).export()
    assert isinstance(exported, ol.ModelProto)
    assert exported.SerializeToString() == model.SerializeToString()
    assert exported.graph.paged_cache_initializer[0].blocks[0].key.raw_data == \
        model.graph.paged_cache_initializer[0].blocks[0].key.raw_data
    from_bytes = runtime.GraphBuilder(model.SerializeToString()).export()
    assert from_bytes.SerializeToString() == model.SerializeToString()


def test_renames_move_uses_and_bindings():
    builder = runtime.GraphBuilder(feedback_model())
    builder.rename_input("past", "history")
    builder.rename_output("present", "next")
    g = builder.export().graph
    assert [i.name for i in g.input] == ["delta", "history"]
    assert list(g.node[0].input) == ["delta", "history"]
    assert list(g.node[0].output) == ["next"]
    assert list(g.node[1].input) == ["next"]
    assert (g.persistent_bindings[0].input_name, g.persistent_bindings[0].output_name) == \
        ("history", "next")
    with pytest.raises(ValueError, match="'y' is already a value name of the graph"):
        builder.rename_input("delta", "y")


def test_a_direct_rename_leaves_a_dangling_binding_that_export_rejects():
    builder = runtime.GraphBuilder(feedback_model())
    builder.graph.input[1].name = "renamed"
    builder.graph.node[0].input[1] = "renamed"
    with pytest.raises(ValueError) as err:
        builder.export()
    message = str(err.value)
    assert "GraphBuilder::Export" in message
    assert "persistent binding 0 (input 'past' <- output 'present')" in message
    assert "unknown input name 'past'" in message


def test_nodes_inputs_outputs_initializers_and_bindings_are_added_and_removed():
    builder = runtime.GraphBuilder(feedback_model())
    builder.add_node(parser.parse_node("[abs] z = Abs(y)"))
    builder.add_output(ol.ValueInfoProto(name="z"))
    assert [n.name for n in builder.export().graph.node] == ["add", "neg", "abs"]
    with pytest.raises(ValueError) as err:
        builder.remove_node("add")
    assert "output 'present' is still used by node 1 (Neg 'neg'), graph output 'present', " \
           "persistent binding 'past' <- 'present'" in str(err.value)
    builder.remove_output("z")
    builder.remove_node("abs")
    with pytest.raises(ValueError, match="bound by persistent binding 'past' <- 'present'"):
        builder.remove_input("past")
    builder.remove_persistent_binding("past")
    declared = ol.ValueInfoProto()
    declared.CopyFrom(builder.graph.output[0])
    builder.remove_output("present")
    builder.add_output(ol.ValueInfoProto(name="present"))
    with pytest.raises(ValueError, match="output 'present' has no declared type"):
        builder.add_persistent_binding("past", "present")
    assert len(builder.graph.persistent_bindings) == 0
    builder.remove_output("present")
    builder.add_output(declared)
    builder.add_persistent_binding("past", "present")
    with pytest.raises(ValueError, match="duplicate binding input name 'past'"):
        builder.add_persistent_binding("past", "y")
    builder.add_initializer(ol.TensorProto(name="delta", data_type=ol.TensorProto.FLOAT, dims=[2],
                                           float_data=[1, 2]))
    builder.remove_input("delta")
    g = builder.export().graph
    assert [i.name for i in g.input] == ["past"]
    assert [t.name for t in g.initializer] == ["delta"]
    assert len(g.persistent_bindings) == 1


def test_make_paged_cache_initializer_rejects_a_duplicate_name():
    builder = runtime.GraphBuilder(paged_model())
    with pytest.raises(ValueError, match="'cache' is already used by paged_cache_initializer"):
        builder.make_paged_cache_initializer("cache", cache_proto())


@pytest.mark.parametrize("mutate, fragments", [
    (lambda c: setattr(c.blocks[1], "start", 3),
     ["paged_cache_initializer 'cache.blocks[1]'", "start 3 is not contiguous (expected 2)"]),
    (lambda c: setattr(c.blocks[0], "length", 5),
     ["'cache.blocks[0]'", "length 5 exceeds the page capacity 4"]),
    (lambda c: c.blocks[1].ClearField("value"),
     ["paged_cache_initializer 'cache'", "blocks[1]", "missing value payload"]),
])
def test_make_paged_cache_initializer_rejects_invalid_caches_naming_block_and_field(
        mutate, fragments):
    builder = runtime.GraphBuilder(paged_model(default=False))
    cache = cache_proto((2, 2))
    mutate(cache)
    with pytest.raises(ValueError) as err:
        builder.make_paged_cache_initializer("cache", cache)
    for fragment in fragments:
        assert fragment in str(err.value)
    assert len(builder.graph.paged_cache_initializer) == 0


def test_a_built_cache_initializer_seeds_the_omitted_bound_input_of_a_state():
    builder = runtime.GraphBuilder(paged_model(default=False))
    builder.make_paged_cache_initializer("cache", cache_proto((2,)))
    state = runtime.PersistentValueState(builder.export(), {})
    assert [(b.start, b.length) for b in state.values["cache"].blocks] == [(0, 2)]
    state.run(make_context(), feeds(7, 8))
    blocks = state.values["cache"].blocks
    assert [(b.start, b.length) for b in blocks] == [(0, 2), (2, 1)]
    numpy.testing.assert_array_equal(
        numpy.frombuffer(blocks[1].key.raw_data, numpy.float32), numpy.full(2, 7))


def test_standard_exports_refuse_what_they_cannot_preserve():
    message = "graph.persistent_bindings ('past' <- 'present')"
    with pytest.raises(ValueError, match="standard ONNX export cannot preserve") as err:
        runtime.GraphBuilder(feedback_model()).export_standard_onnx()
    assert message in str(err.value)
    with pytest.raises(ValueError) as err:
        runtime.export_standard_onnx(paged_model())
    assert "graph.paged_cache_initializer ('cache')" in str(err.value)
    with pytest.raises(ValueError, match="onnx-light extensions") as err:
        ol.to_onnx(feedback_model())
    assert message in str(err.value)
    with pytest.raises(ValueError, match="ONNX text export cannot preserve") as err:
        printer.to_text(paged_model())
    assert "graph.paged_cache_initializer ('cache')" in str(err.value)
    assert "graph.persistent_bindings ('cache' <- 'next_cache')" in str(err.value)

    import onnx
    plain = plain_model()
    data = runtime.GraphBuilder(plain).export_standard_onnx()
    assert data == plain.SerializeToString() == runtime.export_standard_onnx(plain)
    assert onnx.load_from_string(data).graph.node[0].op_type == "Add"


def test_extraction_prefixing_and_merging_work_on_ordinary_models():
    prefixed = runtime.add_prefix(plain_model(), "b/")
    assert [n.name for n in prefixed.graph.node] == ["b/r"]
    assert list(prefixed.graph.node[0].input) == ["b/x", "b/w"]
    merged = runtime.merge_models(plain_model(), prefixed, [("y", "b/x")])
    assert [i.name for i in merged.graph.input] == ["x"]
    assert [o.name for o in merged.graph.output] == ["b/y"]
    assert list(merged.graph.node[1].input) == ["y", "b/w"]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    out = runtime.RuntimeSession(merged).run(context, {"x": numpy.zeros(2, numpy.float32)})
    numpy.testing.assert_array_equal(numpy.from_dlpack(out["b/y"]), [2, 4])
    head = runtime.extract_model(merged, ["x"], ["y"])
    assert [n.name for n in head.graph.node] == ["r"]
    assert [t.name for t in head.graph.initializer] == ["w"]


def test_extraction_prefixing_and_merging_reject_cache_initializers():
    cache_only = paged_model(bind=False)
    with pytest.raises(ValueError, match="ExtractModel cannot preserve paged_cache_initializer "
                                         "'cache'.*use GraphBuilder"):
        runtime.extract_model(cache_only, ["cache", "k", "v"], ["next_cache"])
    with pytest.raises(ValueError, match="AddPrefix cannot preserve paged_cache_initializer 'cache'"):
        runtime.add_prefix(cache_only, "p/")
    with pytest.raises(ValueError, match=r"MergeModels \(second model\) cannot preserve "
                                         "paged_cache_initializer 'cache'"):
        runtime.merge_models(plain_model(), cache_only, [])
    with pytest.raises(ValueError, match="AddPrefix cannot preserve persistent binding "
                                         "'past' <- 'present'"):
        runtime.add_prefix(feedback_model(), "p/")
