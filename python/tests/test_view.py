"""The tensor-view layer: torch CPU tensors and numpy arrays are read in place (no copy), with
their real strides, and bad objects give TypeError / ValueError naming the argument."""
import numpy as np
import pytest
import torch

import _tilestack as C


def test_view_reads_pointer_shape_strides_in_place():
    base = torch.zeros((6, 10), dtype=torch.bfloat16)
    v = base[1:, 2:].t()  # offset, transposed, non-contiguous
    ptr, dtype, shape, strides = C.view_info(v)
    assert ptr == v.data_ptr() == base.data_ptr() + (10 + 2) * 2
    assert dtype == 'bf16'
    assert shape == (8, 5) and strides == (1, 10)


@pytest.mark.parametrize('dtype,name', [
    (torch.float32, 'f32'), (torch.bfloat16, 'bf16'), (torch.float16, 'f16'),
    (torch.float8_e4m3fn, 'e4m3'), (torch.int32, 'i32'), (torch.int64, 'i64'),
    (torch.int8, 'i8'), (torch.uint8, 'u8')])
def test_dtypes(dtype, name):
    assert C.view_info(torch.zeros(3, dtype=dtype))[1] == name


def test_numpy_array_in_place():
    a = np.zeros((4, 6), dtype=np.float32)[:, ::2]
    ptr, dtype, shape, strides = C.view_info(a)
    assert ptr == a.__array_interface__['data'][0]
    assert dtype == 'f32' and shape == (4, 3) and strides == (6, 2)


def test_bad_objects_name_the_argument():
    with pytest.raises(TypeError, match="'obj' is None"):
        C.view_info(None)
    with pytest.raises(TypeError, match="'obj' must be a torch tensor"):
        C.view_info([1.0, 2.0])
    with pytest.raises(TypeError, match='complex64'):
        C.view_info(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="'obj' must be a CPU tensor, got device meta"):
        C.view_info(torch.empty(2, device='meta'))
    with pytest.raises(ValueError, match='at most 4'):
        C.view_info(torch.zeros(1, 1, 1, 1, 1))


def test_errors_are_also_runtime_errors():
    # upstream's native checks raise RuntimeError: code catching that keeps working
    assert issubclass(C.ValueError, ValueError) and issubclass(C.ValueError, RuntimeError)
    assert issubclass(C.TypeError, TypeError) and issubclass(C.TypeError, RuntimeError)


@pytest.mark.parametrize('make', [
    lambda: torch.arange(24, dtype=torch.float32).view(2, 3, 4)[:, 1:, ::2],
    lambda: torch.zeros(5, 7, dtype=torch.bfloat16).t(),
    lambda: torch.zeros(3, 0, dtype=torch.int64),
    lambda: torch.zeros((), dtype=torch.int32),
    lambda: torch.zeros(8, dtype=torch.float8_e4m3fn)[3:],
    lambda: torch.zeros(2, 2, dtype=torch.bool).expand(3, 2, 2),
    lambda: torch.zeros(4, 4, requires_grad=True),
    lambda: torch.nn.Parameter(torch.zeros(3, 3)),
])
def test_dlpack_path_matches_attribute_path(make):
    # The fast path (DLPack's C exchange API, structs declared from the spec) and the
    # attribute path must build the same view of every tensor.
    t = make()
    fast = C.view_info(t)
    C._set_dlpack(False)
    try:
        slow = C.view_info(t)
    finally:
        C._set_dlpack(True)
    assert fast == slow
    assert fast[0] == t.data_ptr() and fast[2] == tuple(t.shape) and fast[3] == t.stride()
