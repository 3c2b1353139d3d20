"""deep_gemm.utils.math: upstream's quantisation casts, computed by libtilestack's byte-exact
quantisers (include/tilestack/quant.h) instead of torch ops. Same shapes, dtypes and values."""
import torch

from _tilestack_py import C

__all__ = ['ceil_div', 'align', 'ceil_to_ue8m0', 'pack_ue8m0_to_int', 'unpack_ue8m0_from_int',
           'per_token_cast_to_fp8', 'per_channel_cast_to_fp8', 'per_block_cast_to_fp8',
           'per_custom_dims_cast_to_fp8', 'per_token_cast_to_fp4', 'transpose_packed_fp4',
           'cast_back_from_fp4']


def ceil_div(x, y):
    return (x + y - 1) // y


def align(x, y):
    return ceil_div(x, y) * y


def ceil_to_ue8m0(x):
    """|x| rounded up to a power of two, exponent clamped to [1, 254] (pure torch, as upstream:
    it is a formula on any tensor, not a kernel)."""
    bits = x.abs().float().view(torch.int)
    exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return (exp.clamp(1, 254) << 23).view(torch.float)


def pack_ue8m0_to_int(x):
    """f32 powers of two [..., 4n] -> their exponent bytes, four per int32."""
    if x.dtype != torch.float or x.size(-1) % 4:
        raise C.ValueError('deep_gemm.utils.pack_ue8m0_to_int: x must be float32 with a last dim divisible by 4')
    if ((x.view(torch.int) & ((1 << 23) - 1)) != 0).any():
        raise C.ValueError('deep_gemm.utils.pack_ue8m0_to_int: x must hold powers of two')
    return (x.view(torch.int) >> 23).to(torch.uint8).view(torch.int)


def unpack_ue8m0_from_int(packed_sf):
    return (packed_sf.view(torch.uint8).to(torch.int) << 23).view(torch.float)


def _x2d(x, fn):
    if not isinstance(x, torch.Tensor):
        raise C.TypeError(f"{fn}: argument 'x' must be a torch tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise C.ValueError(f"{fn}: argument 'x' must be 2-D, got shape {tuple(x.shape)}")
    return x.shape


def per_token_cast_to_fp8(x, use_ue8m0, gran_k=128, use_packed_ue8m0=False):
    """x [m, n] -> (e4m3 [m, n], sf): f32 [m, ceil(n/gran_k)], or with use_packed_ue8m0 int32
    [m, ceil(ceil(n/gran_k)/4)] (upstream needs ceil(n/gran_k) % 4 == 0; here the missing
    trailing bytes are 0)."""
    fn = 'deep_gemm.utils.per_token_cast_to_fp8'
    m, n = _x2d(x, fn)
    sfk = ceil_div(n, gran_k) if gran_k > 0 else 0
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn)
    sf = (torch.empty((m, ceil_div(sfk, 4)), dtype=torch.int32) if use_packed_ue8m0
          else torch.empty((m, sfk), dtype=torch.float32))
    C.cast(0, x, use_ue8m0, gran_k, use_packed_ue8m0, q, sf)
    return q, sf


def per_block_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """x [m, n] -> (e4m3 [m, n], f32 sf [ceil(m/gran_k), ceil(n/gran_k)])."""
    fn = 'deep_gemm.utils.per_block_cast_to_fp8'
    m, n = _x2d(x, fn)
    g = gran_k if gran_k > 0 else 1
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn)
    sf = torch.empty((ceil_div(m, g), ceil_div(n, g)), dtype=torch.float32)
    C.cast(1, x, use_ue8m0, gran_k, False, q, sf)
    return q, sf


def per_channel_cast_to_fp8(x, use_ue8m0, gran_k=128):
    """x [m, n] with m % gran_k == 0 -> (e4m3 [m, n], f32 sf [m/gran_k, n])."""
    fn = 'deep_gemm.utils.per_channel_cast_to_fp8'
    m, n = _x2d(x, fn)
    g = gran_k if gran_k > 0 else 1
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn)
    sf = torch.empty((m // g, n), dtype=torch.float32)
    C.cast(2, x, use_ue8m0, gran_k, False, q, sf)
    return q, sf


def per_custom_dims_cast_to_fp8(x, dims, use_ue8m0):
    """One scale per index of `dims` over all other dims. A torch formula as upstream (no
    kernel behind it in either stack)."""
    excluded = tuple(i for i in range(x.dim()) if i not in set(dims))
    sf = x.abs().float().amax(dim=excluded, keepdim=True).clamp(1e-4) / 448.0
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    return (x * (1.0 / sf)).to(torch.float8_e4m3fn), sf.squeeze()


def per_token_cast_to_fp4(x, use_ue8m0, gran_k=128, use_packed_ue8m0=False):
    """x [m, n] (n even) -> (packed e2m1 int8 [m, n/2], sf as per_token_cast_to_fp8 with
    amax/6): upstream's strict-threshold codes, byte for byte."""
    fn = 'deep_gemm.utils.per_token_cast_to_fp4'
    m, n = _x2d(x, fn)
    if use_packed_ue8m0 and not use_ue8m0:
        raise C.ValueError(f'{fn}: use_packed_ue8m0 needs use_ue8m0')
    sfk = ceil_div(n, gran_k) if gran_k > 0 else 0
    q = torch.empty((m, n // 2), dtype=torch.int8)
    sf = (torch.empty((m, ceil_div(sfk, 4)), dtype=torch.int32) if use_packed_ue8m0
          else torch.empty((m, sfk), dtype=torch.float32))
    C.cast(3, x, use_ue8m0, gran_k, use_packed_ue8m0, q, sf)
    return q, sf


def transpose_packed_fp4(a):
    """Packed fp4 [m, n/2] -> packed fp4 [n, m/2] of the transpose (m even)."""
    fn = 'deep_gemm.utils.transpose_packed_fp4'
    m, n2 = _x2d(a, fn)
    if a.dtype != torch.int8:
        raise C.TypeError(f"{fn}: argument 'a' must be int8 (packed fp4), got {a.dtype}")
    out = torch.empty((n2 * 2, m // 2), dtype=torch.int8)
    C.transpose_packed_fp4(a, out)
    return out


def cast_back_from_fp4(packed, sf, gran_k=128, use_packed_ue8m0=False):
    """Packed fp4 [m, n/2] with per-token sf -> f32 [m, n]."""
    fn = 'deep_gemm.utils.cast_back_from_fp4'
    m, n2 = _x2d(packed, fn)
    if use_packed_ue8m0:
        # the last int32 may carry padding bytes past the last K block: not scales
        sf = unpack_ue8m0_from_int(sf)[:, :ceil_div(n2 * 2, gran_k)]
    out = torch.empty((m, n2 * 2), dtype=torch.float32)
    C.cast_back(1, packed, sf, 1, gran_k, out)
    return out
