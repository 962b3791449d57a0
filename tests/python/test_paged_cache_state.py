"""PagedCacheProto values in persistent state (spec "Serialized cache values"): accepted and
returned through initial values, values, reset and runs; paged_cache_initializer defaults seed
omitted bound inputs; a serialized returned cache resumes in a new model."""
import numpy
import pytest

from onnx_light import onnx as ol
from onnx_light.onnx_py._onnxpykernels import runtime


def dense_page(capacity, width, base):
    data = (base + numpy.arange(capacity * width, dtype=numpy.float32)).reshape(1, 1, capacity, width)
    return ol.TensorProto(data_type=ol.TensorProto.FLOAT, dims=list(data.shape),
                          raw_data=data.tobytes())


def cache_proto(lengths=(3,)):
    cache = ol.PagedCacheProto(name="cache")
    start = 0
    for i, length in enumerate(lengths):
        cache.blocks.append(ol.PagedCacheBlockProto(
            start=start, length=length, key=dense_page(4, 2, 10 * i), value=dense_page(4, 3, 100 + i)))
        start += length
    return cache


def page_array(tensor_proto):
    return numpy.frombuffer(tensor_proto.raw_data, numpy.float32).reshape(list(tensor_proto.dims))


def append_page(ctx, inputs):
    """test.AppendPage(cache, k, v): a new block with the current k/v after the last one."""
    cache, k, v = inputs
    assert isinstance(cache, ol.PagedCacheProto)
    k = numpy.from_dlpack(k)
    v = numpy.from_dlpack(v)
    start = sum(b.length for b in cache.blocks)
    out = ol.PagedCacheProto()
    out.CopyFrom(cache)
    out.blocks.append(ol.PagedCacheBlockProto(
        start=start, length=k.shape[2],
        key=ol.TensorProto(data_type=ol.TensorProto.FLOAT, dims=list(k.shape), raw_data=k.tobytes()),
        value=ol.TensorProto(data_type=ol.TensorProto.FLOAT, dims=list(v.shape), raw_data=v.tobytes())))
    return [out]


def paged_model(default=True, bind=True):
    model = ol.ModelProto(ir_version=10)
    model.opset_import.add(domain="", version=18)
    model.opset_import.add(domain="test", version=1)
    g = model.graph
    g.name = "paged"
    cache_in = g.input.add(name="cache")
    cache_in.type.struct_type.name = "cache"
    for name, width in (("k", 2), ("v", 3)):
        t = g.input.add(name=name).type.tensor_type
        t.elem_type = ol.TensorProto.FLOAT
        for d in (1, 1, 1, width):
            t.shape.dim.add(dim_value=d)
    out = g.output.add(name="next_cache")
    out.type.struct_type.name = "cache"
    g.node.add(op_type="AppendPage", domain="test", input=["cache", "k", "v"], output=["next_cache"])
    if default:
        g.paged_cache_initializer.append(cache_proto())
    if bind:
        g.persistent_bindings.add(input_name="cache", output_name="next_cache")
    return model


def make_context():
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    context.register_kernel("test", "AppendPage", append_page)
    return context


def feeds(k, v):
    return {"k": numpy.full((1, 1, 1, 2), k, numpy.float32), "v": numpy.full((1, 1, 1, 3), v, numpy.float32)}


def test_default_seeds_an_omitted_input_and_values_return_paged_cache_proto():
    state = runtime.PersistentValueState(paged_model(), {})
    seeded = state.values["cache"]
    assert isinstance(seeded, ol.PagedCacheProto)
    assert [(b.start, b.length) for b in seeded.blocks] == [(0, 3)]
    numpy.testing.assert_array_equal(page_array(seeded.blocks[0].key), page_array(cache_proto().blocks[0].key))

    context = make_context()
    out = state.run(context, feeds(7, 8))
    assert isinstance(out["next_cache"], ol.PagedCacheProto)
    state.run(context, feeds(9, 10))
    grown = state.values["cache"]
    assert [(b.start, b.length) for b in grown.blocks] == [(0, 3), (3, 1), (4, 1)]
    numpy.testing.assert_array_equal(page_array(grown.blocks[2].key), numpy.full((1, 1, 1, 2), 9))
    numpy.testing.assert_array_equal(page_array(grown.blocks[1].value), numpy.full((1, 1, 1, 3), 8))

    state.reset({})  # omitted again: the default is seeded again
    assert [(b.start, b.length) for b in state.values["cache"].blocks] == [(0, 3)]
    assert len(grown.blocks) == 3  # exported values stay valid


def test_paged_cache_proto_initial_values_and_reset():
    state = runtime.PersistentValueState(paged_model(default=False), {"cache": cache_proto((2, 2))})
    assert [(b.start, b.length) for b in state.values["cache"].blocks] == [(0, 2), (2, 2)]
    state.run(make_context(), feeds(1, 2))
    assert state.values["cache"].blocks[2].start == 4
    state.reset({"cache": ol.PagedCacheProto()})
    assert len(state.values["cache"].blocks) == 0


def test_a_dictionary_with_the_cache_structure_is_a_cache():
    empty = runtime.PersistentValueState(paged_model(default=False), {"cache": {"blocks": []}})
    assert isinstance(empty.values["cache"], ol.PagedCacheProto)
    assert len(empty.values["cache"].blocks) == 0
    page = {"start": numpy.array(0, numpy.int64), "length": numpy.array(1, numpy.int64),
            "key": numpy.zeros((1, 1, 2, 2), numpy.float32), "value": numpy.ones((1, 1, 2, 3), numpy.float32)}
    state = runtime.PersistentValueState(paged_model(default=False), {"cache": {"blocks": [page]}})
    values = state.values["cache"]
    assert isinstance(values, ol.PagedCacheProto)
    assert (values.blocks[0].start, values.blocks[0].length) == (0, 1)
    numpy.testing.assert_array_equal(page_array(values.blocks[0].value), numpy.ones((1, 1, 2, 3)))


def test_a_serialized_returned_cache_resumes_in_a_new_model_independently():
    state = runtime.PersistentValueState(paged_model(), {})
    context = make_context()
    state.run(context, feeds(4, 5))
    data = state.values["cache"].SerializeToString()

    resumed_model = paged_model(default=False)
    restored = ol.PagedCacheProto()
    restored.ParseFromString(data)
    restored.name = "cache"
    resumed_model.graph.paged_cache_initializer.append(restored)
    resumed = runtime.PersistentValueState(resumed_model, {})
    resumed.run(context, feeds(6, 7))
    state.run(context, feeds(8, 9))
    assert [b.start for b in resumed.values["cache"].blocks] == [0, 3, 4]
    numpy.testing.assert_array_equal(page_array(resumed.values["cache"].blocks[2].key), numpy.full((1, 1, 1, 2), 6))
    numpy.testing.assert_array_equal(page_array(state.values["cache"].blocks[2].key), numpy.full((1, 1, 1, 2), 8))


@pytest.mark.parametrize("mutate, fragments", [
    (lambda c: c.blocks[1].ClearField("key"), ["blocks[1]", "missing key payload"]),
    (lambda c: setattr(c.blocks[1], "start", 3), ["cache.blocks[1]", "contiguous"]),
    (lambda c: setattr(c.blocks[0], "length", 0), ["cache.blocks[0]", "not positive"]),
    (lambda c: setattr(c.blocks[0], "length", 5), ["cache.blocks[0]", "exceeds"]),
])
def test_invalid_caches_are_rejected_naming_the_block(mutate, fragments):
    cache = cache_proto((2, 2))
    mutate(cache)
    with pytest.raises(ValueError) as err:
        runtime.PersistentValueState(paged_model(default=False), {"cache": cache})
    for fragment in fragments:
        assert fragment in str(err.value)


def test_missing_cache_without_default_names_the_input():
    with pytest.raises(ValueError, match="missing initial value for persistent input 'cache'"):
        runtime.PersistentValueState(paged_model(default=False), {})
