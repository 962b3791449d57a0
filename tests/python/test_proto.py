"""The proto classes of onnx_light.onnx: protobuf's Python API over the C++ messages."""
import copy
import gc
import pickle

import onnx
import pytest

import onnx_light
from onnx_light import onnx as ol
from onnx_light.onnx_py import _onnxpykernels


def test_every_exported_class_is_a_message_class_named_after_its_descriptor():
    names = ["ModelProto", "GraphProto", "NodeProto", "TensorProto", "ValueInfoProto",
             "TypeProto", "AttributeProto", "FunctionProto", "OperatorSetIdProto",
             "TensorShapeProto", "StringStringEntryProto", "SequenceProto",
             "PersistentBindingProto", "StructTypeProto", "StructFieldProto",
             "AffineLayoutProto", "EncodedValueProto", "PagedCacheProto",
             "PagedCacheBlockProto"]
    for name in names:
        cls = getattr(ol, name)
        assert issubclass(cls, ol.Message)
        assert cls.DESCRIPTOR.full_name == "onnx_light." + name
        assert isinstance(cls(), cls)
    assert ol.TypeProto.Tensor.DESCRIPTOR.full_name == "onnx_light.TypeProto.Tensor"
    assert ol.TensorShapeProto.Dimension.__qualname__ == "TensorShapeProto.Dimension"


def test_enums_are_class_attributes_with_name_and_value_lookup():
    assert ol.TensorProto.FLOAT == 1
    assert ol.TensorProto.BFLOAT16 == 16
    assert ol.AttributeProto.INT == 2
    assert ol.AttributeProto.GRAPHS == 10
    assert ol.TensorProto.DataType.Name(7) == "INT64"
    assert ol.TensorProto.DataType.Value("FLOAT16") == 10
    assert ol.TensorProto.DataType.FLOAT == 1
    assert ol.TensorProto.EXTERNAL == 1
    assert ol.IR_VERSION == 14
    with pytest.raises(ValueError, match="no name defined for value 99"):
        ol.TensorProto.DataType.Name(99)


def test_keyword_constructor_sets_scalars_strings_bytes_repeated_and_sub_messages():
    node = ol.NodeProto(op_type="Add", input=["a", "b"], output=["c"], name="add0",
                        attribute=[ol.AttributeProto(name="alpha", f=0.5, type=ol.AttributeProto.FLOAT)])
    assert node.op_type == "Add"
    assert list(node.input) == ["a", "b"]
    assert node.attribute[0].f == 0.5
    assert node.attribute[0].type == ol.AttributeProto.FLOAT
    attr = ol.AttributeProto(name="s", s=b"\x00\xff", type="STRING")
    assert attr.s == b"\x00\xff"
    assert attr.type == ol.AttributeProto.STRING
    model = ol.ModelProto(ir_version=10, graph={"name": "g", "node": [node]},
                          opset_import=[{"domain": "", "version": 18}])
    assert model.graph.name == "g"
    assert model.graph.node[0].op_type == "Add"
    assert model.opset_import[0].version == 18
    with pytest.raises(ValueError, match='has no "bogus" field'):
        ol.NodeProto(bogus=1)


def test_scalar_assignment_checks_types_and_ranges():
    t = ol.TensorProto()
    t.data_type = ol.TensorProto.INT64
    t.name = "w"
    t.raw_data = b"\x01\x02"
    assert (t.data_type, t.name, t.raw_data) == (7, "w", b"\x01\x02")
    with pytest.raises(TypeError, match="expected one of: int"):
        t.data_type = 1.5
    with pytest.raises(TypeError, match="str, bytes"):
        t.name = 3
    with pytest.raises(ValueError, match="out of range"):
        t.data_type = 2**40
    with pytest.raises(ValueError, match="unknown enum value 7"):
        t.data_location = 7
    with pytest.raises(AttributeError):
        t.dims = [1, 2]
    with pytest.raises(AttributeError):
        t.not_a_field = 1


def test_unset_sub_message_reads_as_default_and_is_created_on_first_write():
    vi = ol.ValueInfoProto(name="x")
    shape = vi.type.tensor_type.shape
    assert not vi.HasField("type")
    assert len(shape.dim) == 0
    assert not vi.HasField("type")
    shape.dim.add(dim_value=3)
    assert vi.HasField("type")
    assert vi.type.tensor_type.HasField("shape")
    assert vi.type.WhichOneof("value") == "tensor_type"
    assert vi.type.tensor_type.shape.dim[0].dim_value == 3


def test_sub_message_assignment_copies_and_none_clears():
    model = ol.ModelProto()
    graph = ol.GraphProto(name="g")
    model.graph = graph
    graph.name = "changed"
    assert model.graph.name == "g"
    model.graph = None
    assert not model.HasField("graph")


def test_oneof_switch_and_which_oneof():
    tp = ol.TypeProto()
    assert tp.WhichOneof("value") is None
    tensor_view = tp.tensor_type
    tensor_view.elem_type = ol.TensorProto.FLOAT
    assert tp.WhichOneof("value") == "tensor_type"
    tp.sequence_type.elem_type.tensor_type.elem_type = ol.TensorProto.INT64
    assert tp.WhichOneof("value") == "sequence_type"
    assert not tp.HasField("tensor_type")
    assert tensor_view.elem_type == 0  # the view follows the parent's current field
    tp.ClearField("value")
    assert tp.WhichOneof("value") is None
    with pytest.raises(ValueError, match="no oneof"):
        tp.WhichOneof("nope")


def test_has_field_and_clear_field():
    node = ol.NodeProto(name="n", input=["a"])
    assert node.HasField("name")
    assert not node.HasField("domain")
    with pytest.raises(ValueError, match='no singular "input" field'):
        node.HasField("input")
    node.ClearField("name")
    node.ClearField("input")
    assert not node.HasField("name")
    assert len(node.input) == 0
    with pytest.raises(ValueError):
        node.ClearField("missing")


def test_repeated_scalar_container_behaves_like_a_list():
    t = ol.TensorProto(dims=[1, 2, 3, 4])
    dims = t.dims
    assert len(dims) == 4
    assert dims[-1] == 4
    assert dims[1:3] == [2, 3]
    assert list(dims) == [1, 2, 3, 4]
    assert dims == [1, 2, 3, 4]
    assert 3 in dims
    dims.append(5)
    dims.extend([6, 7])
    dims.insert(0, 0)
    assert t.dims == [0, 1, 2, 3, 4, 5, 6, 7]
    del dims[0]
    del dims[-2:]
    assert t.dims == [1, 2, 3, 4, 5]
    dims[0] = 10
    dims.remove(3)
    assert dims.pop() == 5
    assert t.dims == [10, 2, 4]
    dims[0:2] = [7, 8, 9]
    assert t.dims == [7, 8, 9, 4]
    with pytest.raises(IndexError):
        dims[10]
    with pytest.raises(TypeError):
        dims.extend([1, "x"])
    assert t.dims == [7, 8, 9, 4]  # a failed extend leaves the field unchanged
    dims.clear()
    assert len(t.dims) == 0
    f = ol.TensorProto(float_data=[0.5, 1.5])
    assert f.float_data == [0.5, 1.5]
    s = ol.TensorProto(string_data=[b"a", "b"])
    assert s.string_data == [b"a", b"b"]


def test_repeated_composite_container_add_append_extend_delete():
    graph = ol.GraphProto()
    first = graph.node.add(op_type="Relu", name="r")
    assert isinstance(first, ol.NodeProto)
    other = ol.NodeProto(op_type="Abs")
    graph.node.append(other)
    other.op_type = "Changed"
    assert graph.node[1].op_type == "Abs"  # append copies, as protobuf does
    graph.node.extend([ol.NodeProto(op_type="Neg"), ol.NodeProto(op_type="Exp")])
    assert [n.op_type for n in graph.node] == ["Relu", "Abs", "Neg", "Exp"]
    assert [n.op_type for n in graph.node[1:3]] == ["Abs", "Neg"]
    assert graph.node[-1].op_type == "Exp"
    third = graph.node[2]
    del graph.node[0]
    assert third.op_type == "Neg"  # views of other elements keep their element
    assert first.op_type == "Relu"  # the removed element is detached but alive
    first.op_type = "Detached"
    assert [n.op_type for n in graph.node] == ["Abs", "Neg", "Exp"]
    graph.node.remove(ol.NodeProto(op_type="Neg"))
    assert [n.op_type for n in graph.node] == ["Abs", "Exp"]
    assert graph.node == [ol.NodeProto(op_type="Abs"), ol.NodeProto(op_type="Exp")]
    with pytest.raises(TypeError):
        graph.node.append(ol.TensorProto())
    graph.node.clear()
    assert len(graph.node) == 0


def test_views_keep_the_root_alive():
    node = ol.ModelProto(graph={"node": [{"op_type": "Relu"}]}).graph.node[0]
    gc.collect()
    assert node.op_type == "Relu"
    dims = ol.TensorProto(dims=[4, 5]).dims
    gc.collect()
    assert dims == [4, 5]


def test_element_view_after_parent_parse_raises_instead_of_dangling():
    graph = ol.GraphProto(node=[{"op_type": "A"}, {"op_type": "B"}])
    b = graph.node[1]
    graph.ParseFromString(ol.GraphProto(node=[{"op_type": "Z"}]).SerializeToString())
    with pytest.raises(RuntimeError, match="no longer exists"):
        b.op_type


def test_serialize_parse_copy_merge_equality_and_text_format():
    model = ol.ModelProto(ir_version=9, producer_name="p",
                          graph={"name": "g", "node": [{"op_type": "Relu", "input": ["x"]}]})
    data = model.SerializeToString()
    assert isinstance(data, bytes)
    assert model.ByteSize() == len(data)
    again = ol.ModelProto.FromString(data)
    assert again == model
    parsed = ol.ModelProto()
    assert parsed.ParseFromString(data) == len(data)
    assert parsed == model
    other = ol.ModelProto()
    other.CopyFrom(model)
    assert other == model
    other.graph.name = "h"
    assert other != model
    other.MergeFrom(ol.ModelProto(producer_version="v"))
    assert other.producer_version == "v" and other.producer_name == "p"
    model.graph.CopyFrom(model.graph)  # self copy is a no-op
    assert 'producer_name: "p"' in str(model)
    assert 'op_type: "Relu"' in repr(model)
    assert [f.name for f, _ in model.ListFields()] == ["ir_version", "producer_name", "graph"]
    assert model.ListFields()[0][1] == 9
    with pytest.raises(ValueError, match="Error parsing"):
        ol.ModelProto.FromString(b"\xff\xff\xff")
    assert pickle.loads(pickle.dumps(model)) == model
    assert copy.deepcopy(model) == model
    with pytest.raises(TypeError):
        hash(model)


def test_copy_from_an_enclosing_message_into_its_child_is_safe():
    graph = ol.GraphProto(name="outer", node=[{"op_type": "If"}])
    attr = graph.node[0].attribute.add(name="then_branch", type=ol.AttributeProto.GRAPH)
    attr.g.CopyFrom(graph)
    assert graph.node[0].attribute[0].g.name == "outer"
    assert graph.node[0].attribute[0].g.node[0].op_type == "If"


def test_spec_example_persistent_binding_round_trips_through_bytes():
    model = ol.ModelProto(ir_version=10, opset_import=[{"domain": "", "version": 18}])
    model.graph.name = "accumulate"
    binding = model.graph.persistent_bindings.add()
    binding.input_name = "past"
    binding.output_name = "present"
    again = ol.load_model(model.SerializeToString())
    assert len(again.graph.persistent_bindings) == 1
    assert again.graph.persistent_bindings[0].input_name == "past"
    assert again.graph.persistent_bindings[0].output_name == "present"
    assert again == model


def test_paged_cache_and_encoded_value_messages_are_usable():
    block = ol.PagedCacheBlockProto(start=0, length=3)
    block.key.CopyFrom(ol.TensorProto(dims=[1, 1, 4, 2], data_type=ol.TensorProto.FLOAT,
                                      raw_data=bytes(32)))
    block.encoded_value.affine.storage_type = ol.TensorProto.INT8
    block.encoded_value.affine.scale.CopyFrom(ol.TensorProto(data_type=1, float_data=[0.5]))
    block.encoded_value.raw_data = bytes(8)
    assert block.WhichOneof("key_payload") == "key"
    assert block.WhichOneof("value_payload") == "encoded_value"
    assert block.encoded_value.WhichOneof("layout") == "affine"
    cache = ol.PagedCacheProto(name="cache", blocks=[block])
    model = ol.ModelProto()
    model.graph.paged_cache_initializer.append(cache)
    restored = ol.ModelProto.FromString(model.SerializeToString())
    assert restored.graph.paged_cache_initializer[0].blocks[0].length == 3
    assert restored.graph.paged_cache_initializer[0].blocks[0].encoded_value.affine.scale.float_data == [0.5]
    assert isinstance(restored.graph.paged_cache_initializer[0], ol.PagedCacheProto)


def test_save_and_load_a_model_file(tmp_path):
    model = ol.ModelProto(ir_version=10, graph={"name": "g"})
    path = tmp_path / "m.onnx"
    ol.save_model(model, path)
    assert path.read_bytes() == model.SerializeToString()
    assert ol.load_model(path) == model
    assert ol.load_model(str(path)) == model
    with open(path, "rb") as f:
        assert ol.load_model(f) == model


def test_from_onnx_and_to_onnx_exchange_by_bytes():
    import onnx.helper as oh

    node = oh.make_node("Add", ["a", "b"], ["c"])
    graph = oh.make_graph([node], "g",
                          [oh.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2]),
                           oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [2])],
                          [oh.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [2])])
    theirs = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    ours = ol.from_onnx(theirs)
    assert isinstance(ours, ol.ModelProto)
    assert ours.graph.node[0].op_type == "Add"
    back = ol.to_onnx(ours)
    assert isinstance(back, onnx.ModelProto)
    assert back == theirs
    g = ol.from_onnx(theirs.graph)
    assert isinstance(g, ol.GraphProto)
    # Our objects accept their messages where a message is expected (copied by bytes).
    m = ol.ModelProto()
    m.graph.CopyFrom(theirs.graph)
    assert m.graph == g


@pytest.mark.parametrize("extend", ["persistent_bindings", "paged_cache_initializer",
                                    "encoded_initializer", "struct_types", "struct_type"])
def test_to_onnx_rejects_models_with_onnx_light_extensions(extend):
    model = ol.ModelProto(ir_version=10, graph={"name": "g"})
    if extend == "persistent_bindings":
        model.graph.persistent_bindings.add(input_name="past", output_name="present")
    elif extend == "paged_cache_initializer":
        model.graph.paged_cache_initializer.add(name="cache")
    elif extend == "encoded_initializer":
        model.graph.encoded_initializer.add(name="w")
    elif extend == "struct_types":
        model.struct_types.add(name="Cache")
    else:
        model.graph.input.add(name="cache").type.struct_type.type_ref = "Cache"
    with pytest.raises(ValueError, match="onnx-light extensions") as info:
        ol.to_onnx(model)
    assert extend in str(info.value)


def test_runtime_errors_map_to_python_exceptions_by_code():
    raise_error = _onnxpykernels._raise_error
    cases = {"invalid_argument": ValueError, "invalid_model": ValueError,
             "type_error": TypeError, "not_implemented": NotImplementedError,
             "failed_precondition": RuntimeError, "runtime": RuntimeError}
    for code, exc in cases.items():
        with pytest.raises(exc, match=f"message for {code}"):
            raise_error(code, f"message for {code}")
    with pytest.raises(onnx_light.CancelledError, match="stopped") as info:
        raise_error("cancelled", "stopped")
    assert isinstance(info.value, RuntimeError)
    assert onnx_light.CancelledError is _onnxpykernels.runtime.CancelledError
    assert issubclass(onnx_light.ParseError, ValueError)
