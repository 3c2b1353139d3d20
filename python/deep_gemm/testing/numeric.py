"""calc_diff (libtilestack's ts_calc_diff, float64) and the small comparison helpers."""
import torch

from _tilestack_py import C

__all__ = ['calc_diff', 'count_bytes', 'assert_bitwise_equal']


def calc_diff(x, y):
    """1 - 2·Σxy / Σ(x² + y²) in float64 (0 when both are all zero), as a Python float.
    Inputs may be any dtype the C metric reads and any strides; shapes must match."""
    return C.calc_diff(x, y)


def count_bytes(*tensors):
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def assert_bitwise_equal(x, y):
    if x.shape != y.shape or x.dtype != y.dtype:
        raise AssertionError(f'shape/dtype differ: {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}')
    xb = x.contiguous().view(torch.uint8)
    yb = y.contiguous().view(torch.uint8)
    if not torch.equal(xb, yb):
        raise AssertionError('tensors differ bitwise')
