"""Feed conversion as properties (hypothesis): over dtypes, shapes, strides, byte order,
DLPack producers (torch) and nesting depth, a feed is accepted without a copy where the spec
says so (contiguous native NumPy arrays and DLPack tensors: the Identity output views the
caller's bytes) or rejected with an error whose message names the input, never a crash.
Example counts are modest so that the file runs in well under a minute."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnx_light.onnx_py._onnxpykernels import runtime

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
TORCH = {np.float32: torch.float32, np.float64: torch.float64, np.float16: torch.float16,
         np.int8: torch.int8, np.int16: torch.int16, np.int32: torch.int32,
         np.int64: torch.int64, np.uint8: torch.uint8, np.bool_: torch.bool}


@functools.lru_cache(maxsize=None)
def identity_session(dtype) -> runtime.RuntimeSession:
    """y = Identity(x) with x of `dtype` and any shape (no shape declared)."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"], name="id")], "g",
        [onnx.helper.make_tensor_value_info("x", elem, None)],
        [onnx.helper.make_tensor_value_info("y", elem, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)],
                                   ir_version=10)
    return runtime.RuntimeSession(model.SerializeToString())


CONTEXT = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))


def run(dtype, feed):
    return identity_session(dtype).run(CONTEXT, {"x": feed})["y"]


def rejected(dtype, feed, *fragments):
    with pytest.raises((ValueError, TypeError)) as info:
        run(dtype, feed)
    for f in fragments:
        assert f in str(info.value), str(info.value)


shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


@SETTINGS
@given(dtype=st.sampled_from(NUMERIC), shape=shapes, data=st.data())
def test_contiguous_native_arrays_are_accepted_without_a_copy(dtype, shape, data):
    a = data.draw(hnp.arrays(dtype, shape))
    y = run(dtype, a)
    assert tuple(y.shape) == a.shape
    if a.size:
        assert y.data_ptr == a.__array_interface__["data"][0]
    np.testing.assert_array_equal(np.from_dlpack(y), a)


@SETTINGS
@given(dtype=st.sampled_from(NUMERIC), shape=hnp.array_shapes(min_dims=1, max_dims=4,
                                                               min_side=2, max_side=5),
       data=st.data())
def test_noncontiguous_views_are_rejected_naming_the_input(dtype, shape, data):
    a = np.zeros(shape, dtype)
    axis = data.draw(st.integers(0, len(shape) - 1))
    step = data.draw(st.integers(2, 3))
    index = [slice(None)] * len(shape)
    index[axis] = slice(None, None, step)
    view = a[tuple(index)]
    if view.flags.c_contiguous:  # a step over a dimension of size 1 after slicing
        return
    rejected(dtype, view, "input 'x'", "noncontiguous")


@SETTINGS
@given(dtype=st.sampled_from([d for d in NUMERIC if np.dtype(d).itemsize > 1]),
       shape=shapes)
def test_non_native_byte_order_is_rejected_naming_the_input(dtype, shape):
    swapped = np.zeros(shape, np.dtype(dtype).newbyteorder())
    rejected(dtype, swapped, "input 'x'", "byte-swapped")


@SETTINGS
@given(dtype=st.sampled_from(NUMERIC), shape=hnp.array_shapes(min_dims=2, max_dims=4,
                                                               min_side=2, max_side=5))
def test_transposed_views_are_rejected_naming_the_input(dtype, shape):
    rejected(dtype, np.zeros(shape, dtype).T, "input 'x'", "noncontiguous")


@SETTINGS
@given(dtype=st.sampled_from(list(TORCH)), shape=shapes, transpose=st.booleans())
def test_torch_tensors_are_accepted_without_a_copy_or_rejected(dtype, shape, transpose):
    t = torch.zeros(shape, dtype=TORCH[dtype])
    if transpose and t.dim() >= 2 and t.shape[0] > 1 and t.shape[-1] > 1 and t.numel():
        rejected(dtype, t.transpose(0, -1), "'x'", "noncontiguous")
        return
    y = run(dtype, t)
    assert tuple(y.shape) == tuple(t.shape)
    if t.numel():
        assert y.data_ptr == t.data_ptr()


@SETTINGS
@given(dtype=st.sampled_from(NUMERIC),
       other=st.sampled_from([np.complex64, np.complex128, "datetime64[s]", "timedelta64[s]"]))
def test_unsupported_dtypes_are_rejected_with_a_message(dtype, other):
    rejected(dtype, np.zeros(3, other), "'x'")


@SETTINGS
@given(dtype=st.sampled_from([np.float32, np.int64]),
       feed=st.sampled_from([np.float32, np.int64]))
def test_a_feed_of_another_dtype_is_rejected_naming_both(dtype, feed):
    if dtype is feed:
        return
    rejected(dtype, np.zeros(2, feed), "input 'x'", "expected dtype")


def nested(depth: int, kind: str):
    value = np.zeros(2, np.float32)
    for _ in range(depth):
        value = [value] if kind == "list" else {"f": value}
    return value


@SETTINGS
@given(depth=st.integers(1, 200), kind=st.sampled_from(["list", "dict"]))
def test_nested_feeds_for_a_tensor_input_are_rejected_never_crash(depth, kind):
    with pytest.raises((ValueError, TypeError)) as info:
        run(np.float32, nested(depth, kind))
    if depth > 65:
        assert "nest more than 64 levels" in str(info.value)


@SETTINGS
@given(kind=st.sampled_from(["list", "dict"]), width=st.integers(1, 3))
def test_self_referential_feeds_are_rejected(kind, width):
    value = [] if kind == "list" else {}
    for i in range(width):
        if kind == "list":
            value.append(value)
        else:
            value[f"f{i}"] = value
    rejected(np.float32, value, "nest more than 64 levels")


@SETTINGS
@given(obj=st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=5),
                     st.tuples(st.integers()), st.sets(st.integers(), max_size=3),
                     st.binary(max_size=8)))
def test_arbitrary_python_objects_are_accepted_or_rejected_never_crash(obj):
    try:
        run(np.float32, obj)
    except (ValueError, TypeError) as e:
        assert str(e)


@pytest.mark.parametrize("dtype", [np.intc, np.uintc, np.int_, np.uint, np.longlong,
                                   np.ulonglong, np.half, np.single, np.double, np.bool_])
def test_a_borrowed_array_is_kept_alive_by_its_tensor_and_released_after(dtype):
    """The direct ndarray path (no buffer export) holds one reference to the array while a
    tensor views it, and gives it back when the last view dies."""
    import gc
    import sys
    a = np.arange(6).astype(dtype).reshape(2, 3)
    before = sys.getrefcount(a)
    t = runtime.Tensor(a, "x")
    assert sys.getrefcount(a) == before + 1
    assert t.data_ptr == a.__array_interface__["data"][0]
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    del t
    gc.collect()
    assert sys.getrefcount(a) == before


def test_an_unaligned_array_is_rejected_naming_the_input():
    raw = np.zeros(4 * 8 + 1, np.uint8)
    a = np.frombuffer(raw.data, np.float32, count=8, offset=1)
    assert not a.flags.aligned
    rejected(np.float32, a, "'x'", "not aligned")
