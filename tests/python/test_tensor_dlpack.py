"""runtime.Tensor: zero-copy import from NumPy/PyTorch and export through DLPack."""
import gc

import numpy as np
import pytest
import torch

from onnx_light.onnx_py._onnxpykernels import runtime


def numpy_ptr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype,data_type", [(np.float32, 1), (np.uint8, 2), (np.int8, 3),
                                             (np.int32, 6), (np.int64, 7), (np.bool_, 9),
                                             (np.float16, 10), (np.float64, 11),
                                             (np.uint64, 13)])
def test_numpy_array_is_imported_without_copy(dtype, data_type):
    a = np.arange(6).astype(dtype).reshape(2, 3)
    t = runtime.Tensor(a, "x")
    assert t.data_ptr == numpy_ptr(a)
    assert t.name == "x"
    assert t.shape == (2, 3)
    assert t.dtype == np.dtype(dtype)
    assert t.data_type == data_type
    assert t.nbytes == a.nbytes
    view = t.numpy()
    assert numpy_ptr(view) == numpy_ptr(a)
    assert not view.flags.writeable
    np.testing.assert_array_equal(view, a)


def test_scalar_and_empty_arrays():
    s = runtime.Tensor(np.array(3.5, dtype=np.float32), "s")
    assert s.shape == ()
    assert s.numpy()[()] == 3.5
    e = runtime.Tensor(np.zeros((0, 4), dtype=np.float32), "e")
    assert e.shape == (0, 4)
    assert e.numpy().shape == (0, 4)


def test_imported_array_stays_alive_after_the_source_is_deleted():
    a = np.arange(1000, dtype=np.float32)
    ptr = numpy_ptr(a)
    t = runtime.Tensor(a, "x")
    del a
    gc.collect()
    garbage = [np.full(1000, -1.0, dtype=np.float32) for _ in range(20)]
    assert t.data_ptr == ptr
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float32))
    del garbage


def test_torch_tensor_is_imported_through_dlpack_without_copy():
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = runtime.Tensor(src, "x")
    assert t.data_ptr == src.data_ptr()
    assert t.shape == (3, 4)
    assert t.dtype == np.float32
    ptr = src.data_ptr()
    del src
    gc.collect()
    assert t.data_ptr == ptr
    np.testing.assert_array_equal(t.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    b = runtime.Tensor(torch.tensor([1, 2], dtype=torch.bfloat16), "b")
    assert b.data_type == 16
    assert b.numpy().astype(np.float32).tolist() == [1.0, 2.0]


def test_export_through_numpy_and_torch_from_dlpack_shares_the_pointer():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = runtime.Tensor(a, "x")
    assert t.__dlpack_device__() == (1, 0)
    n = np.from_dlpack(t)
    assert numpy_ptr(n) == numpy_ptr(a)
    np.testing.assert_array_equal(n, a)
    p = torch.from_dlpack(t)
    assert p.data_ptr() == numpy_ptr(a)
    assert p.tolist() == a.tolist()
    # The consumers keep the payload alive after every other reference is gone.
    del a, t
    gc.collect()
    np.testing.assert_array_equal(n, np.arange(6).reshape(2, 3))
    assert p.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_round_trip_torch_to_runtime_to_numpy_keeps_one_buffer():
    src = torch.ones(4, dtype=torch.float16)
    t = runtime.Tensor(src, "h")
    out = np.from_dlpack(t)
    assert numpy_ptr(out) == src.data_ptr()
    assert out.dtype == np.float16


def test_runtime_tensor_input_shares_the_owner_with_a_new_name():
    a = np.ones(3, dtype=np.float32)
    t = runtime.Tensor(a, "x")
    u = runtime.Tensor(t, "y")
    assert (u.name, t.name) == ("y", "x")
    assert u.data_ptr == t.data_ptr


def test_noncontiguous_array_is_rejected_naming_the_input():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match="input 'past' is noncontiguous"):
        runtime.Tensor(a.T, "past")
    with pytest.raises(ValueError, match="input 'step' is noncontiguous"):
        runtime.Tensor(a[:, ::2], "step")
    with pytest.raises(ValueError, match="noncontiguous"):
        runtime.Tensor(torch.arange(12.0).reshape(3, 4).t(), "tt")


def test_byte_swapped_array_is_rejected():
    a = np.arange(3, dtype=">f4")
    with pytest.raises(ValueError, match="input 'x' is byte-swapped"):
        runtime.Tensor(a, "x")


def test_object_and_unsupported_dtypes_are_rejected():
    with pytest.raises(ValueError, match="input 'o' has an unsupported dtype"):
        runtime.Tensor(np.array([1, None], dtype=object), "o")
    with pytest.raises(ValueError, match="input 'c' has an unsupported dtype"):
        runtime.Tensor(np.zeros(2, dtype=np.complex64), "c")
    with pytest.raises(TypeError, match="input 'l': expected a runtime Tensor"):
        runtime.Tensor([1.0, 2.0], "l")


def test_string_arrays_are_materialized_as_string_tensors():
    t = runtime.Tensor(np.array([["a", "bc"], ["", "d"]]), "s")
    assert t.data_type == 8
    assert t.shape == (2, 2)
    assert t.numpy().tolist() == [["a", "bc"], ["", "d"]]
    with pytest.raises(ValueError, match="cannot be exported through DLPack"):
        t.__dlpack__()


def test_tensor_requiring_grad_must_be_detached():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"input 'w' is a tensor that requires grad.*detach\(\)"):
        runtime.Tensor(w, "w")
    t = runtime.Tensor(w.detach(), "w")
    assert t.data_ptr == w.data_ptr()


def test_dlpack_export_refuses_copy_and_other_devices():
    t = runtime.Tensor(np.ones(2, dtype=np.float32), "x")
    with pytest.raises(BufferError, match="copy=True"):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="CPU"):
        t.__dlpack__(dl_device=(2, 0))
    capsule = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)
    assert "dltensor" in repr(capsule)
