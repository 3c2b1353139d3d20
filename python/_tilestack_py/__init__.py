"""Helpers shared by the upstream-named packages (deep_gemm, deep_select, ...): the extension
handle and the stubs for functions that have no CPU implementation yet."""
import _tilestack as C  # noqa: F401  (re-exported: the one native module)
import torch

_DTYPES = {'bf16': torch.bfloat16, 'f32': torch.float32, 'i32': torch.int32, 'i64': torch.int64,
           'e4m3': torch.float8_e4m3fn, 'u8': torch.uint8, 'i8': torch.int8, 'bool': torch.bool,
           'f16': torch.float16, 'f64': torch.float64, 'i16': torch.int16,
           'ue8m0x4': torch.int32}  # packed ue8m0 scales travel as int32


def tensor_of(desc, copy=False):
    """A (memoryview, dtype, shape, strides) description of library memory (tsp_describe) ->
    torch tensor: a view that aliases it (its memoryview's exporter keeps the memory alive), or
    a fresh contiguous copy when `copy`. None stays None."""
    if desc is None:
        return None
    mv, dt, shape, strides = desc
    dtype = _DTYPES[dt]
    if any(s == 0 for s in shape):
        return torch.empty(shape, dtype=dtype)
    t = torch.frombuffer(mv, dtype=torch.uint8).view(dtype).as_strided(shape, strides)
    return t.clone(memory_format=torch.contiguous_format) if copy else t


def missing(qualname, what):
    """A stand-in for an upstream function tilestack does not offer yet: calling it raises
    NotImplementedError naming what is missing, so ported code fails loudly, never silently."""
    def stub(*args, **kwargs):
        raise NotImplementedError(f'{qualname} is not available in tilestack: {what}')
    stub.__name__ = qualname.rsplit('.', 1)[-1]
    stub.__qualname__ = stub.__name__
    stub.__doc__ = f'Not available on CPU (tilestack): {what}. Raises NotImplementedError.'
    return stub


def pair(x, fn, arg):
    """Upstream passes quantised operands as (data, scale) pairs."""
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.TypeError(f"{fn}: argument '{arg}' must be a (tensor, scale factor) pair, "
                          f'got {type(x).__name__}')
    return x[0], x[1]
