"""ai.rt::QuantizePagedCache (spec "Selected-block quantization"): the spec's block-3 graph as
written, formats chosen by the zero points' types, unselected pages untouched, the whole cache
and every parameter checked before anything is produced."""
import numpy
import pytest

from onnx_light import onnx as ol
from onnx_light.onnx_py._onnxpykernels import runtime

WIDTH_K, WIDTH_V, CAPACITY = 4, 3, 4


def dense(data):
    return ol.TensorProto(data_type=ol.TensorProto.FLOAT, dims=list(data.shape), raw_data=data.tobytes())


def cache(lengths=(4, 4, 3, 2, 1), seed=0):
    rng = numpy.random.default_rng(seed)
    out = ol.PagedCacheProto()
    start = 0
    for length in lengths:
        k = numpy.zeros((1, 1, CAPACITY, WIDTH_K), numpy.float32)
        v = numpy.zeros((1, 1, CAPACITY, WIDTH_V), numpy.float32)
        k[:, :, :length] = rng.uniform(-0.4, 0.4, (1, 1, length, WIDTH_K))
        v[:, :, :length] = rng.uniform(-0.9, 0.9, (1, 1, length, WIDTH_V))
        out.blocks.append(ol.PagedCacheBlockProto(start=start, length=length, key=dense(k), value=dense(v)))
        start += length
    return out


def scalar(name, data_type, raw):
    return ol.TensorProto(name=name, data_type=data_type, dims=[], raw_data=raw)


def spec_graph():
    """The spec's example: block 3 to INT2 keys / UINT4 values, then FLOAT16 keys / BFLOAT16 values."""
    model = ol.ModelProto(ir_version=10)
    model.opset_import.add(domain="", version=18)
    model.opset_import.add(domain="ai.rt", version=1)
    g = model.graph
    g.name = "quantize"
    g.input.add(name="cache").type.struct_type.name = "cache"
    for name in ("quantized_cache", "dequantized_cache"):
        g.output.add(name=name).type.struct_type.name = "cache"
    f32 = lambda x: numpy.float32(x).tobytes()
    g.initializer.extend([
        scalar("key_scale", ol.TensorProto.FLOAT, f32(0.25)),
        scalar("key_zero_int2", ol.TensorProto.INT2, b"\x00"),
        scalar("value_scale", ol.TensorProto.FLOAT, f32(0.125)),
        scalar("value_zero_u4", ol.TensorProto.UINT4, b"\x08"),
        scalar("ignored_scale", ol.TensorProto.FLOAT, f32(1)),
        scalar("key_float16", ol.TensorProto.FLOAT16, numpy.float16(0).tobytes()),
        scalar("value_bfloat16", ol.TensorProto.BFLOAT16, b"\x00\x00"),
        ol.TensorProto(name="selected_blocks", data_type=ol.TensorProto.INT64, dims=[1],
                       raw_data=numpy.array([3], numpy.int64).tobytes()),
    ])
    g.node.add(op_type="QuantizePagedCache", domain="ai.rt", name="quantize",
               input=["cache", "selected_blocks", "key_scale", "key_zero_int2", "value_scale", "value_zero_u4"],
               output=["quantized_cache"])
    g.node.add(op_type="QuantizePagedCache", domain="ai.rt", name="dequantize",
               input=["quantized_cache", "selected_blocks", "ignored_scale", "key_float16",
                      "ignored_scale", "value_bfloat16"],
               output=["dequantized_cache"])
    return model


def run(model, feeds):
    return runtime.RuntimeSession(model).run(runtime.RuntimeContext(), feeds)


def unpack(encoded, count, bits, signed):
    raw = numpy.frombuffer(encoded.raw_data, numpy.uint8)
    per = 8 // bits
    codes = numpy.array([(raw[i // per] >> (bits * (i % per))) & ((1 << bits) - 1) for i in range(count)], numpy.int32)
    if signed:
        codes = numpy.where(codes >= (1 << (bits - 1)), codes - (1 << bits), codes)
    return codes


def page(t):
    return numpy.frombuffer(t.raw_data, numpy.float32).reshape(list(t.dims))


def test_the_spec_graph_quantizes_block_3_and_materializes_it_again():
    source = cache()
    out = run(spec_graph(), {"cache": source})
    quantized, dequantized = out["quantized_cache"], out["dequantized_cache"]
    assert isinstance(quantized, ol.PagedCacheProto)
    block = quantized.blocks[3]
    assert (block.start, block.length) == (11, 2)  # range and capacity kept
    assert block.encoded_key.affine.storage_type == ol.TensorProto.INT2
    assert block.encoded_value.affine.storage_type == ol.TensorProto.UINT4
    assert list(block.encoded_key.logical_type.tensor_type.shape.dim) [2].dim_value == CAPACITY
    k = page(source.blocks[3].key)
    v = page(source.blocks[3].value)
    # Round half to even, saturated; unused rows are logical zeros (the zero point).
    expect_k = numpy.clip(numpy.rint(k / 0.25), -2, 1).astype(numpy.int32)
    expect_k[:, :, 2:] = 0
    expect_v = numpy.clip(numpy.rint(v / 0.125) + 8, 0, 15).astype(numpy.int32)
    expect_v[:, :, 2:] = 8
    numpy.testing.assert_array_equal(unpack(block.encoded_key, CAPACITY * WIDTH_K, 2, True), expect_k.ravel())
    numpy.testing.assert_array_equal(unpack(block.encoded_value, CAPACITY * WIDTH_V, 4, False), expect_v.ravel())
    # Other blocks are the same pages.
    for i in (0, 1, 2, 4):
        assert quantized.blocks[i].key.raw_data == source.blocks[i].key.raw_data
    # Dequantized: FLOAT16 keys and BFLOAT16 values of the reconstructed codes.
    back = dequantized.blocks[3]
    assert back.key.data_type == ol.TensorProto.FLOAT16
    assert back.value.data_type == ol.TensorProto.BFLOAT16
    keys16 = numpy.frombuffer(back.key.raw_data, numpy.float16).reshape(1, 1, CAPACITY, WIDTH_K)
    numpy.testing.assert_array_equal(keys16.astype(numpy.float32), expect_k * 0.25)
    bits = numpy.frombuffer(back.value.raw_data, numpy.uint16).astype(numpy.uint32) << 16
    values_bf16 = bits.view(numpy.float32).reshape(1, 1, CAPACITY, WIDTH_V)
    numpy.testing.assert_array_equal(values_bf16, (expect_v - 8) * 0.125)
    # The mixed-format cache serializes and parses back.
    data = dequantized.SerializeToString()
    again = ol.PagedCacheProto()
    again.ParseFromString(data)
    assert [b.WhichOneof("key_payload") for b in again.blocks] == ["key"] * 5


def quantize_model(zero_type=ol.TensorProto.INT8, zero_raw=b"\x00", scale=0.1, indices=(1,), index_dims=None):
    model = ol.ModelProto(ir_version=10)
    model.opset_import.add(domain="", version=18)
    model.opset_import.add(domain="ai.rt", version=1)
    g = model.graph
    g.name = "q"
    g.input.add(name="cache").type.struct_type.name = "cache"
    g.output.add(name="out").type.struct_type.name = "cache"
    g.initializer.extend([
        scalar("scale", ol.TensorProto.FLOAT, numpy.float32(scale).tobytes()),
        scalar("zero", zero_type, zero_raw),
        ol.TensorProto(name="blocks", data_type=ol.TensorProto.INT64,
                       dims=[len(indices)] if index_dims is None else index_dims,
                       raw_data=numpy.array(indices, numpy.int64).tobytes()),
    ])
    g.node.add(op_type="QuantizePagedCache", domain="ai.rt", name="quantize",
               input=["cache", "blocks", "scale", "zero", "scale", "zero"], output=["out"])
    return model


def test_an_empty_selection_still_validates_the_whole_cache_and_keeps_every_page():
    source = cache()
    out = run(quantize_model(indices=()), {"cache": source})["out"]
    assert out.SerializeToString() == source.SerializeToString()
    broken = cache()
    broken.blocks[4].start = 99
    with pytest.raises(ValueError, match=r"quantize.*cache.blocks\[4\]: start 99 is not contiguous"):
        run(quantize_model(indices=()), {"cache": broken})
    too_long = cache()
    too_long.blocks[2].length = 5
    with pytest.raises(ValueError, match=r"blocks\[2\].*exceeds the page capacity 4"):
        run(quantize_model(indices=(0,)), {"cache": too_long})


@pytest.mark.parametrize("model, message", [
    (quantize_model(indices=(1, 1)), "block index 1 is repeated"),
    (quantize_model(indices=(5,)), "block index 5 is outside the cache's 5 blocks"),
    (quantize_model(indices=(-1,)), "block index -1 is outside"),
    (quantize_model(indices=(1,), index_dims=[1, 1]), "rank-1 INT64"),
    (quantize_model(scale=0.0), "scale must be positive and finite"),
    (quantize_model(scale=float("inf")), "scale must be positive and finite"),
    (quantize_model(zero_type=ol.TensorProto.INT32, zero_raw=b"\x00" * 4), "selects no page format"),
    (quantize_model(zero_type=ol.TensorProto.UINT4, zero_raw=b"\x10"), None),
])
def test_bad_indices_and_parameters_are_rejected_before_anything_is_produced(model, message):
    if message is None:  # a UINT4 zero point of 0 (the high nibble is padding): accepted
        out = run(model, {"cache": cache()})["out"]
        assert out.blocks[1].encoded_key.affine.storage_type == ol.TensorProto.UINT4
        return
    with pytest.raises(ValueError, match=message):
        run(model, {"cache": cache()})


def test_requantizing_an_affine_page_decodes_its_codes_first():
    once = run(quantize_model(indices=(0, 2)), {"cache": cache()})["out"]
    model = quantize_model(zero_type=ol.TensorProto.UINT8, zero_raw=b"\x80", scale=0.05, indices=(0,))
    twice = run(model, {"cache": once})["out"]
    assert twice.blocks[0].encoded_key.affine.storage_type == ol.TensorProto.UINT8
    assert twice.blocks[2].encoded_key.affine.storage_type == ol.TensorProto.INT8  # untouched
    k = page(cache().blocks[0].key)
    first = numpy.clip(numpy.rint(k / 0.1), -128, 127) * 0.1
    second = numpy.clip(numpy.rint(first / 0.05) + 128, 0, 255).astype(numpy.uint8)
    codes = numpy.frombuffer(twice.blocks[0].encoded_key.raw_data, numpy.uint8)
    numpy.testing.assert_array_equal(codes, second.ravel())
