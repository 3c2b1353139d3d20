"""Shared helpers of the tile_kernels wrappers: argument checks that name the argument (before
any allocation, so an error leaves nothing written), upstream's scale-factor allocation
(tile_kernels/quant/common.py: row-major f32, TMA-aligned column-major f32, packed UE8M0
int32 column-major) and the call into the extension."""
import torch

from _tilestack_py import C


def ceil_div(a, b):
    return (a + b - 1) // b


def align(a, b):
    return ceil_div(a, b) * b


def tensor(x, fn, arg, dtypes=None, ndim=None):
    if not isinstance(x, torch.Tensor):
        raise C.TypeError(f"{fn}: argument '{arg}' must be a torch.Tensor, got {type(x).__name__}")
    if dtypes is not None and x.dtype not in dtypes:
        raise C.TypeError(f"{fn}: argument '{arg}' has dtype {x.dtype}; expected "
                          + ' or '.join(str(d) for d in dtypes))
    if ndim is not None and x.dim() != ndim:
        raise C.ValueError(f"{fn}: argument '{arg}' must be {ndim}-D, got shape {tuple(x.shape)}")
    return x


def integer(v, fn, arg, lo=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise C.TypeError(f"{fn}: argument '{arg}' must be an int, got {type(v).__name__}")
    if lo is not None and v < lo:
        raise C.ValueError(f"{fn}: argument '{arg}' must be >= {lo}, got {v}")
    return v


def choice(v, fn, arg, options):
    if v not in options:
        raise C.ValueError(f"{fn}: argument '{arg}' must be one of {options}, got {v!r}")
    return v


def alloc_sf(rows, blocks, col_major, packed, device):
    """Upstream's alloc_scaling_factors + cast_epilogue: [rows, blocks] f32 row-major; with
    col_major a [rows, blocks] view of a [blocks, align(rows, 4)] buffer (strides (1,
    align(rows, 4))); packed UE8M0: int32 [rows, ceil(blocks / 4)], column-major likewise."""
    if packed:
        words = ceil_div(blocks, 4)
        return torch.empty((words, align(rows, 4)), dtype=torch.int32, device=device)[:, :rows].T
    if col_major:
        return torch.empty((blocks, align(rows, 4)), dtype=torch.float32, device=device)[:, :rows].T
    return torch.empty((rows, blocks), dtype=torch.float32, device=device)


def unpack_ue8m0(words, groups):
    """Packed UE8M0 int32 [R, W] -> f32 [R, groups]: byte k of word s (group 4s + k) e gives the
    scale bits e << 23 (2^(e - 127); 0 -> 0), as the kernels decode them."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    e = torch.stack([(w >> (8 * k)) & 255 for k in range(4)], -1).reshape(words.shape[0], -1)[:, :groups]
    return (e << 23).to(torch.int32).view(torch.float32)


def pack_ue8m0_into(sf, words):
    """f32 power-of-two scales [R, G] (round_sf's) -> their exponent bytes, four to an int32 word
    of words [R, ceil(G / 4)] (any strides; bytes past G are 0), as the _ue8m0 kernels store them."""
    e = (sf.view(torch.int32).to(torch.int64) >> 23) & 255
    e = torch.nn.functional.pad(e, (0, words.shape[1] * 4 - sf.shape[1])).view(sf.shape[0], -1, 4)
    words.copy_((e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)).to(torch.int32))


def call(kernel, fn, names, *args):
    """_tilestack.tk: ts_<kernel>(*args); names label the tensor arguments in errors."""
    C.tk(kernel, fn, names, *args)
