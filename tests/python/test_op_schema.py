"""Operator schemas from Python (spec "Versioned operator schema"): runtime.get_schema,
runtime.check_model and runtime.infer_types for ai.rt::PagedAttention and
ai.rt::QuantizePagedCache (domain ai.rt, opset 1)."""
import pytest

from onnx_light import onnx as ol
from onnx_light.onnx_py._onnxpykernels import runtime


def tensor_type(value, elem, dims=None):
    """Sets `value.type` to a tensor type; dims None: unknown rank; str entries: symbolic."""
    t = value.type.tensor_type
    t.elem_type = elem
    if dims is not None:
        shape = t.shape
        for d in dims:
            if isinstance(d, str):
                shape.dim.add(dim_param=d)
            else:
                shape.dim.add(dim_value=d)
    return value


def attention_model(q=("B", 8, "L", 16), v=("B", 2, "L", 32), past_ref=False, **attrs):
    model = ol.ModelProto(ir_version=10)
    model.opset_import.add(domain="", version=18)
    model.opset_import.add(domain="ai.rt", version=1)
    g = model.graph
    g.name = "main"
    tensor_type(g.input.add(name="q"), ol.TensorProto.FLOAT, q)
    tensor_type(g.input.add(name="k"), ol.TensorProto.FLOAT, (q[0], 2, q[2], q[3]) if q else None)
    tensor_type(g.input.add(name="v"), ol.TensorProto.FLOAT, v)
    past = g.input.add(name="past")
    if past_ref:
        past.type.struct_type.type_ref = "PagedCache"
        cache = model.struct_types.add(name="PagedCache")
        blocks = cache.field.add(name="blocks")
        block = blocks.type.sequence_type.elem_type.struct_type
        for name, elem in (("start", 7), ("length", 7), ("key", 1), ("value", 1)):
            block.field.add(name=name).type.tensor_type.elem_type = elem
    else:
        past.type.struct_type.name = "cache"  # layout-less: a paged cache
    node = g.node.add(op_type="PagedAttention", domain="ai.rt", name="attn",
                      input=["q", "k", "v", "past"], output=["y", "present"])
    for name, value in attrs.items():
        node.attribute.add(name=name, type=ol.AttributeProto.INT, i=value)
    g.output.add(name="y")
    g.output.add(name="present")
    return model


def dims(value):
    def one(d):
        if d.HasField("dim_param"):
            return d.dim_param
        return d.dim_value if d.HasField("dim_value") else None
    return [one(d) for d in value.type.tensor_type.shape.dim]


def test_get_schema_reports_signature_and_attribute_defaults():
    s = runtime.get_schema("ai.rt", "PagedAttention", 1)
    assert (s["domain"], s["name"], s["since_version"]) == ("ai.rt", "PagedAttention", 1)
    assert s["attributes"] == {"block_size": 16, "max_tokens": 4096, "is_causal": 1,
                               "left_window_size": -1}
    assert [i["name"] for i in s["inputs"]] == ["Q", "K", "V", "past"]
    assert [o["name"] for o in s["outputs"]] == ["Y", "present"]
    assert s["inputs"][0] == {"name": "Q", "kind": "tensor", "optional": False,
                              "types": ["FLOAT", "FLOAT16", "BFLOAT16"], "rank": 4}
    assert s["inputs"][3]["kind"] == "paged_cache"
    # past/present may also be a sequence of paged caches, one per batch row.
    assert s["inputs"][3]["batch_rows"] and s["outputs"][1]["batch_rows"]
    assert runtime.get_schema("ai.rt", "PagedAttention", 2)["since_version"] == 1
    assert runtime.get_schema("ai.rt", "PagedAttention", 0) is None
    assert runtime.get_schema("", "PagedAttention", 1) is None

    q = runtime.get_schema("ai.rt", "QuantizePagedCache", 1)
    assert q["inputs"][0]["batch_rows"] is False
    assert [i["name"] for i in q["inputs"]] == [
        "cache", "block_indices", "key_scale", "key_zero_point", "value_scale", "value_zero_point"]
    assert q["attributes"] == {}
    assert q["inputs"][3]["types"] == ["INT8", "UINT8", "INT4", "UINT4", "INT2", "UINT2",
                                       "FLOAT", "FLOAT16", "BFLOAT16"]


def test_infer_types_fills_y_and_present_and_leaves_the_argument_unchanged():
    model = attention_model()
    before = model.SerializeToString()
    inferred = runtime.infer_types(model)
    assert model.SerializeToString() == before
    y, present = inferred.graph.output
    assert y.type.tensor_type.elem_type == ol.TensorProto.FLOAT
    assert dims(y) == ["B", 8, "L", 32]
    assert present.type.struct_type.name == "cache"
    assert len(present.type.struct_type.field) == 0
    # Bytes in, the same result out.
    assert runtime.infer_types(before).SerializeToString() == inferred.SerializeToString()


def test_infer_types_keeps_struct_references_and_unknown_ranks():
    inferred = runtime.infer_types(attention_model(q=None, v=None, past_ref=True))
    y, present = inferred.graph.output
    assert y.type.tensor_type.elem_type == ol.TensorProto.FLOAT
    assert not y.type.tensor_type.HasField("shape")
    assert present.type.struct_type.type_ref == "PagedCache"
    assert len(inferred.struct_types) == 1


@pytest.mark.parametrize("name, value, message", [
    ("block_size", 0, "attribute 'block_size' must be positive, got 0"),
    ("max_tokens", -1, "attribute 'max_tokens' must be positive, got -1"),
    ("is_causal", 3, "attribute 'is_causal' must be 0 or 1, got 3"),
    ("left_window_size", -5, "attribute 'left_window_size' must be -1 (unbounded) or non-negative"),
    ("window", 1, "attribute 'window' is not an attribute of ai.rt::PagedAttention (opset 1)"),
])
def test_attribute_checks_raise_value_error_naming_node_and_attribute(name, value, message):
    model = attention_model(**{name: value})
    expected = "graph 'main': node 0 (ai.rt::PagedAttention 'attn'): " + message
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        runtime.check_model(model)
    with pytest.raises(ValueError, match=r"node 0 \(ai.rt::PagedAttention 'attn'\)"):
        runtime.infer_types(model)


def test_type_rules_are_checked_where_input_types_are_declared():
    runtime.check_model(attention_model(left_window_size=0, is_causal=0))
    model = attention_model(q=(2, 6, 1, 16), v=(2, 4, 1, 32))
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 4
    with pytest.raises(ValueError, match=r"the head count 6 of Q 'q' must be a multiple of the "
                                         r"K/V head count 4 of K 'k'"):
        runtime.check_model(model)
    model = attention_model()
    model.graph.input[3].type.tensor_type.elem_type = ol.TensorProto.FLOAT
    with pytest.raises(ValueError, match=r"input 3 'past' \(past\) must be declared as a paged "
                                         r"cache struct: not a struct declaration"):
        runtime.check_model(model)
