"""tile_kernels.quant on CPU: upstream's names, arguments, defaults and return conventions
(QuantTensor = (data, sf); FP8 torch.float8_e4m3fn, packed FP4 torch.int8 two codes a byte,
E5M6 torch.uint8 streams; scales f32 row-major, f32 TMA-aligned column-major, or packed UE8M0
int32 column-major, allocated with upstream's strides). The kernels are libtilestack's
TileKernels ports (docs/kernels.md), exact to upstream's formulas."""
from typing import Optional

import torch

from _tilestack_py import C, missing, pair
from ._common import alloc_sf, call, ceil_div, choice, integer, pack_ue8m0_into, tensor, unpack_ue8m0

_PLAIN = (torch.bfloat16, torch.float32)
_QUANT = (torch.float8_e4m3fn, torch.int8)
_SRC = {torch.bfloat16: 'bf16', torch.float32: 'f32', torch.float8_e4m3fn: 'e4m3', torch.int8: 'fp4'}
_DST = {'e4m3': 'e4m3', 'e2m1': 'fp4'}


def _block(v, fn, arg):
    if not isinstance(v, (tuple, list)) or len(v) != 2 or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in v):
        raise C.TypeError(f"{fn}: argument '{arg}' must be a (tokens, channels) pair of ints, got {v!r}")
    if v[0] < 1 or v[1] < 1:
        raise C.ValueError(f"{fn}: argument '{arg}' must be positive, got {tuple(v)}")
    return int(v[0]), int(v[1])


def _sf_layout(fn, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0):
    if use_packed_ue8m0 and not (use_tma_aligned_col_major_sf and round_sf):
        raise C.ValueError(f'{fn}: use_packed_ue8m0 needs use_tma_aligned_col_major_sf=True and '
                           'round_sf=True (upstream stores packed UE8M0 column-major, power-of-two scales)')


def _input(x, x_block_size, fn):
    """x or (x, x_sf) -> (x, x_sf or None, block or None, hidden)."""
    if isinstance(x, (tuple, list)):
        x, x_sf = pair(x, fn, 'x')
        tensor(x, fn, 'x', _QUANT, 2)
        tensor(x_sf, fn, 'x_sf', (torch.float32, torch.int32), 2)
        if x_block_size is None:
            raise C.ValueError(f"{fn}: argument 'x_block_size' is required for a quantised (x, x_sf) input")
        blk = _block(x_block_size, fn, 'x_block_size')
        hidden = x.shape[1] * (2 if x.dtype == torch.int8 else 1)
        return x, x_sf, blk, hidden
    tensor(x, fn, 'x', _PLAIN, 2)
    if x_block_size is not None:
        raise C.ValueError(f"{fn}: argument 'x_block_size' must be None for a bf16 / f32 input")
    return x, None, None, x.shape[1]


def _out_data(fmt, tokens, hidden, device, fn):
    if fmt == 'e2m1':
        if hidden % 2:
            raise C.ValueError(f"{fn}: FP4 output needs an even hidden size, got {hidden}")
        return torch.empty((tokens, hidden // 2), dtype=torch.int8, device=device)
    return torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device=device)


def _per_token_e5m6(x, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, fn):
    tensor(x, fn, 'x', _PLAIN, 2)
    tokens, hidden = x.shape
    if num_per_channels != hidden:
        raise C.ValueError(f"{fn}: fmt='e5m6' needs num_per_channels == hidden ({hidden}), got {num_per_channels}")
    if hidden % 8:
        raise C.ValueError(f"{fn}: fmt='e5m6' needs hidden % 8 == 0, got {hidden}")
    out = torch.empty((tokens, hidden * 3 // 2), dtype=torch.uint8, device=x.device)
    sf = alloc_sf(tokens, 1, use_tma_aligned_col_major_sf, use_packed_ue8m0, x.device)
    if tokens:
        k = f'per_token_cast_{_SRC[x.dtype]}_to_e5m6'
        if use_packed_ue8m0:
            call(k + '_ue8m0', fn, ('x', 'out', 'sf'), x, out, sf)
        else:
            call(k, fn, ('x', 'out', 'sf'), x, out, sf, round_sf)
    return out, sf


def _per_token_impl(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                    use_packed_ue8m0, fn, sf_only=False, sf=None):
    choice(fmt, fn, 'fmt', ('e5m6', 'e4m3', 'e2m1'))
    integer(num_per_channels, fn, 'num_per_channels', 1)
    _sf_layout(fn, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    if fmt == 'e5m6':
        if x_block_size is not None or sf_only or sf is not None:
            raise C.ValueError(f"{fn}: fmt='e5m6' takes a bf16 / f32 input only (upstream asserts the same)")
        return _per_token_e5m6(x, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, fn)
    x, x_sf, blk, hidden = _input(x, x_block_size, fn)
    tokens = x.shape[0]
    gs = num_per_channels
    dst = _DST[fmt]
    src = _SRC[x.dtype]
    if x_sf is not None and (sf_only or sf is not None):
        raise C.ValueError(f'{fn}: a quantised (x, x_sf) input is not accepted with scales only or '
                           'precomputed scales (upstream asserts the same)')
    if sf is not None:
        tensor(sf, fn, 'sf', (torch.float32, torch.int32), 2)
        out = _out_data(fmt, tokens, hidden, x.device, fn)
        k = f'per_token_cast_{src}_to_{dst}_precomputed_sf' + ('_ue8m0' if sf.dtype == torch.int32 else '')
        if tokens:
            call(k, fn, ('x', 'sf', 'out'), x, sf, out, gs)
        return out
    out_sf = alloc_sf(tokens, ceil_div(hidden, gs), use_tma_aligned_col_major_sf, use_packed_ue8m0, x.device)
    if sf_only:
        if tokens:
            k = f'per_token_cast_{src}_to_{dst}_sf_only'
            if use_packed_ue8m0:
                call(k + '_ue8m0', fn, ('x', 'sf'), x, out_sf, gs)
            else:
                call(k, fn, ('x', 'sf'), x, out_sf, gs, round_sf)
        return out_sf
    out = _out_data(fmt, tokens, hidden, x.device, fn)
    if tokens:
        k = f'per_token_cast_{src}_to_{dst}'
        if x_sf is None:
            if use_packed_ue8m0:
                call(k + '_ue8m0', fn, ('x', 'out', 'sf'), x, out, out_sf, gs)
            else:
                call(k, fn, ('x', 'out', 'sf'), x, out, out_sf, gs, round_sf)
        else:
            in_packed = x_sf.dtype == torch.int32
            names = ('x', 'x_sf', 'out', 'sf')
            if in_packed and use_packed_ue8m0:
                call(k + '_ue8m0', fn, names, x, x_sf, out, out_sf, gs, blk[0], blk[1])
            elif not in_packed and not use_packed_ue8m0:
                call(k, fn, names, x, x_sf, out, out_sf, gs, blk[0], blk[1], round_sf)
            elif in_packed:
                # packed input scales, f32 output scales: the f32 kernel on the decoded scales
                # (the bits the packed kernel decodes them to, so the same codes)
                x_sf = unpack_ue8m0(x_sf, ceil_div(hidden, blk[1]))
                call(k, fn, names, x, x_sf, out, out_sf, gs, blk[0], blk[1], round_sf)
            else:
                # f32 input scales, packed output: round_sf's power-of-two scales (use_packed_ue8m0
                # implies round_sf), then their exponent bytes, as the packed kernel stores them
                dst = torch.empty((tokens, ceil_div(hidden, gs)), dtype=torch.float32, device=x.device)
                call(k, fn, names, x, x_sf, out, dst, gs, blk[0], blk[1], True)
                pack_ue8m0_into(dst, out_sf)
    return out, out_sf


def per_token_cast(x, fmt: str, num_per_channels: int, x_block_size: Optional[tuple] = None,
                   use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                   use_packed_ue8m0: bool = False):
    """Per-token (row-wise) cast to 'e4m3' / 'e2m1' / 'e5m6' -> (out, out_sf). x is bf16 / f32,
    or an (x, x_sf) pair of FP8 / packed-FP4 data with x_block_size its scale blocks."""
    return _per_token_impl(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                           use_packed_ue8m0, 'tile_kernels.quant.per_token_cast')


def per_token_cast_with_sf_only(x, fmt: str, num_per_channels: int, x_block_size: Optional[tuple] = None,
                                use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                use_packed_ue8m0: bool = False):
    """The scales per_token_cast would return, without the quantised data."""
    return _per_token_impl(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                           use_packed_ue8m0, 'tile_kernels.quant.per_token_cast_with_sf_only', sf_only=True)


def per_token_cast_with_precomputed_sf(x, fmt: str, num_per_channels: int, sf, x_block_size: Optional[tuple] = None,
                                       use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                       use_packed_ue8m0: bool = False):
    """Quantise x with the given scales (f32, or packed UE8M0 int32) -> out."""
    fn = 'tile_kernels.quant.per_token_cast_with_precomputed_sf'
    if sf is None:
        raise C.TypeError(f"{fn}: argument 'sf' must be a torch.Tensor, got NoneType")
    return _per_token_impl(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                           use_packed_ue8m0, fn, sf=sf)


def cast_back(x, fmt: str, x_block_size: tuple, x_special_fmt: Optional[str] = None):
    """Dequantise (data, sf) to 'bf16' / 'fp32' with x_block_size = (tokens, channels) per scale;
    data FP8, packed FP4 or E5M6 (x_special_fmt), sf f32 or packed UE8M0 int32 (any strides)."""
    fn = 'tile_kernels.quant.cast_back'
    choice(fmt, fn, 'fmt', ('bf16', 'fp32'))
    choice(x_special_fmt, fn, 'x_special_fmt', (None, 'e5m6'))
    data, sf = pair(x, fn, 'x')
    bh, bw = _block(x_block_size, fn, 'x_block_size')
    out_dtype = torch.bfloat16 if fmt == 'bf16' else torch.float32
    suffix = '' if fmt == 'bf16' else '_f32'
    if x_special_fmt == 'e5m6':
        tensor(data, fn, 'x', (torch.uint8,), 2)
        tensor(sf, fn, 'x_sf', (torch.float32, torch.int32), 2)
        if data.shape[1] % 12:
            raise C.ValueError(f'{fn}: an E5M6 row holds whole groups of 8 values (12 bytes), got {data.shape[1]} bytes')
        kernel, hidden = 'cast_back_e5m6' + suffix, data.shape[1] * 2 // 3
    else:
        tensor(data, fn, 'x', _QUANT, 2)
        tensor(sf, fn, 'x_sf', (torch.float32, torch.int32), 2)
        if data.dtype == torch.int8:
            kernel, hidden = 'cast_back_fp4' + suffix, data.shape[1] * 2
        else:
            kernel, hidden = 'cast_back' + suffix, data.shape[1]
    if sf.dtype == torch.int32:
        kernel += '_ue8m0'
    out = torch.empty((data.shape[0], hidden), dtype=out_dtype, device=data.device)
    if data.shape[0]:
        call(kernel, fn, ('x', 'x_sf', 'out'), data, sf, out, bh, bw)
    return out


def per_token_cast_back(x, fmt: str, num_per_channels: int, x_special_fmt: Optional[str] = None):
    """cast_back with (1, num_per_channels) scale blocks."""
    integer(num_per_channels, 'tile_kernels.quant.per_token_cast_back', 'num_per_channels', 1)
    return cast_back(x, fmt, (1, num_per_channels), x_special_fmt=x_special_fmt)


def unpack_from_e2m1fn_x2(x, out_dtype=torch.float32):
    """Packed FP4 (int8 / uint8, element 2i in the low nibble) -> values [..., 2K] (a torch
    debugging helper upstream too)."""
    fn = 'tile_kernels.quant.unpack_from_e2m1fn_x2'
    tensor(x, fn, 'x', (torch.int8, torch.uint8))
    if x.dim() == 0:
        raise C.ValueError(f"{fn}: argument 'x' needs at least 1 dimension")
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32, device=x.device)
    b = x.view(torch.uint8).to(torch.int64)
    y = torch.stack([table[b & 15], table[b >> 4]], dim=-1)
    return y.reshape(*x.shape[:-1], x.shape[-1] * 2).to(out_dtype)


def per_block_cast(x, fmt: str, block_size: tuple, use_tma_aligned_col_major_sf: bool = False,
                   round_sf: bool = False, use_packed_ue8m0: bool = False):
    """2-D block cast of bf16 / f32 x to 'e4m3' or 'e2m1' (packed FP4, torch.int8 [T, H / 2],
    element 2i in the low nibble) with one scale per (128, 128) or (32, 32) block -> (out,
    out_sf [ceil(T / bm), ceil(H / bk)]: f32, or packed UE8M0 int32 words, four blocks of a
    block row each)."""
    fn = 'tile_kernels.quant.per_block_cast'
    choice(fmt, fn, 'fmt', ('e4m3', 'e2m1'))
    blk = _block(block_size, fn, 'block_size')
    _sf_layout(fn, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    tensor(x, fn, 'x', _PLAIN, 2)
    if blk not in ((128, 128), (32, 32)):
        raise NotImplementedError(
            f'{fn}: only (128, 128) or (32, 32) blocks are available in tilestack '
            f'(ts_per_block_cast[_fp4][_32][_f32]); got block {blk}')
    tokens, hidden = x.shape
    rows, blocks = ceil_div(tokens, blk[0]), ceil_div(hidden, blk[1])
    out = _out_data(fmt, tokens, hidden, x.device, fn)
    sf = alloc_sf(rows, blocks, use_tma_aligned_col_major_sf, use_packed_ue8m0, x.device)
    # the kernels write row-major f32 scales: the column-major layout is filled from a copy,
    # and packed UE8M0 takes their exponent bytes (round_sf scales are powers of two)
    direct = not use_tma_aligned_col_major_sf and not use_packed_ue8m0
    dst = sf if direct else torch.empty((rows, blocks), dtype=torch.float32, device=x.device)
    if tokens:
        kernel = ('per_block_cast' + ('_fp4' if fmt == 'e2m1' else '') + ('' if blk[0] == 128 else '_32')
                  + ('_f32' if x.dtype == torch.float32 else ''))
        call(kernel, fn, ('x', 'out', 'sf'), x, out, dst, round_sf)
        if use_packed_ue8m0:
            pack_ue8m0_into(dst, sf)
        elif not direct:
            sf.copy_(dst)
    return out, sf


per_block_cast_with_sf_only = missing('tile_kernels.quant.per_block_cast_with_sf_only',
                                      'no block-scale sf-only kernel in tilestack')
per_block_cast_with_precomputed_sf = missing('tile_kernels.quant.per_block_cast_with_precomputed_sf',
                                             'no block-scale precomputed-scale kernel in tilestack')


def per_channel_cast_fused(x, fmt: str, num_per_tokens: int, round_sf: bool = False,
                           num_per_channels: Optional[int] = None, pos_to_token=None):
    """Per-channel cast (one f32 scale per channel and 128 output rows) of bf16 / f32 x, or of
    an (x e4m3, x_sf f32 [T, H / 128]) pair (num_per_channels=128), optionally gathering rows
    through pos_to_token (int32, -1 = zero row) -> (out e4m3 [P, H], out_sf [ceil(P / 128), H])."""
    fn = 'tile_kernels.quant.per_channel_cast_fused'
    choice(fmt, fn, 'fmt', ('e4m3',))
    integer(num_per_tokens, fn, 'num_per_tokens', 1)
    if num_per_tokens != 128:
        raise C.ValueError(f"{fn}: argument 'num_per_tokens' must be 128 (as upstream), got {num_per_tokens}")
    names = ['x']
    if isinstance(x, (tuple, list)):
        x, x_sf = pair(x, fn, 'x')
        tensor(x, fn, 'x', (torch.float8_e4m3fn,), 2)
        tensor(x_sf, fn, 'x_sf', (torch.float32,), 2)
        if num_per_channels != 128:
            raise C.ValueError(f"{fn}: argument 'num_per_channels' must be 128 for an FP8 input, got {num_per_channels}")
        args, kernel = [x, x_sf], 'per_channel_cast_fused_e4m3'
        names.append('x_sf')
    else:
        tensor(x, fn, 'x', _PLAIN, 2)
        if num_per_channels is not None:
            raise C.ValueError(f"{fn}: argument 'num_per_channels' must be None for a bf16 / f32 input")
        args, kernel = [x], 'per_channel_cast_fused_' + _SRC[x.dtype]
    rows = x.shape[0]
    if pos_to_token is not None:
        tensor(pos_to_token, fn, 'pos_to_token', (torch.int32,), 1)
        rows = pos_to_token.shape[0]
        args.append(pos_to_token)
        names.append('pos_to_token')
        kernel += '_gather'
    hidden = x.shape[1]
    out = torch.empty((rows, hidden), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((ceil_div(rows, 128), hidden), dtype=torch.float32, device=x.device)
    if rows:
        call(kernel, fn, tuple(names) + ('out', 'sf'), *args, out, sf, round_sf)
    return out, sf


def per_channel_cast(x, fmt: str, num_per_tokens: int, round_sf: bool = False):
    """Per-channel cast with 128-token scale blocks -> (out e4m3 [T, H], out_sf f32 [ceil(T / 128), H])."""
    fn = 'tile_kernels.quant.per_channel_cast'
    tensor(x, fn, 'x', _PLAIN, 2)
    return per_channel_cast_fused(x, fmt, num_per_tokens, round_sf)


def per_channel_cast_and_transpose(x, fmt: str, num_per_tokens: int, round_sf: bool = False):
    """Per-channel cast of bf16 x [T, H] with num_per_tokens (32, 64, 128) scale blocks, output
    transposed -> (out e4m3 [H, T], out_sf f32 [T / num_per_tokens, H])."""
    fn = 'tile_kernels.quant.per_channel_cast_and_transpose'
    tensor(x, fn, 'x', (torch.bfloat16,), 2)
    choice(fmt, fn, 'fmt', ('e4m3',))
    integer(num_per_tokens, fn, 'num_per_tokens', 1)
    tokens, hidden = x.shape
    out = torch.empty((hidden, tokens), dtype=torch.float8_e4m3fn, device=x.device)
    sf = torch.empty((ceil_div(tokens, num_per_tokens), hidden), dtype=torch.float32, device=x.device)
    if tokens:
        call('per_channel_cast_and_transpose', fn, ('x', 'out', 'sf'), x, out, sf, num_per_tokens, round_sf)
    return out, sf


def per_block_cast_lossless(x, fmt: str, x_block_size: tuple, out_block_size: tuple,
                            use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                            use_packed_ue8m0: bool = False):
    """Lossless re-quantisation of packed FP4 (x, x_sf) to e4m3 with out_block_size scales ->
    (out, out_sf); the output scales are powers of two whatever round_sf says (the cast is exact
    when the input scales of an output block span at most 2^11)."""
    fn = 'tile_kernels.quant.per_block_cast_lossless'
    choice(fmt, fn, 'fmt', ('e4m3',))
    data, x_sf = pair(x, fn, 'x')
    tensor(data, fn, 'x', (torch.int8,), 2)
    tensor(x_sf, fn, 'x_sf', (torch.float32, torch.int32), 2)
    ib = _block(x_block_size, fn, 'x_block_size')
    ob = _block(out_block_size, fn, 'out_block_size')
    if use_packed_ue8m0 and not use_tma_aligned_col_major_sf:
        raise C.ValueError(f'{fn}: use_packed_ue8m0 needs use_tma_aligned_col_major_sf=True (upstream stores '
                           'packed UE8M0 column-major)')
    tokens, hidden = data.shape[0], data.shape[1] * 2
    out = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device=data.device)
    sf = alloc_sf(ceil_div(tokens, ob[0]), ceil_div(hidden, ob[1]), use_tma_aligned_col_major_sf, use_packed_ue8m0,
                  data.device)
    kernel = 'per_block_cast_lossless' + {(False, False): '', (True, True): '_ue8m0', (False, True): '_f32_to_ue8m0',
                                          (True, False): '_ue8m0_to_f32'}[(x_sf.dtype == torch.int32,
                                                                           bool(use_packed_ue8m0))]
    if tokens:
        call(kernel, fn, ('x', 'x_sf', 'out', 'sf'), data, x_sf, out, sf, ib[0], ib[1], ob[0], ob[1])
    return out, sf


def rmsnorm_forward_and_per_token_cast(x, weight, eps: float, fmt: str, num_per_channels: int,
                                       use_tma_aligned_col_major_sf: bool = False, round_sf: bool = False,
                                       use_packed_ue8m0: bool = False):
    """y = (x * rstd) * weight (rstd = 1 / sqrt(mean(x^2) + eps)), then the per-token e4m3 cast
    (num_per_channels 128 or hidden) -> (out, out_sf). x bf16 or f32, weight in x's dtype."""
    fn = 'tile_kernels.quant.rmsnorm_forward_and_per_token_cast'
    tensor(x, fn, 'x', (torch.bfloat16, torch.float32), 2)
    tensor(weight, fn, 'weight', (x.dtype,), 1)
    choice(fmt, fn, 'fmt', ('e4m3',))
    integer(num_per_channels, fn, 'num_per_channels', 1)
    _sf_layout(fn, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    tokens, hidden = x.shape
    out = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device=x.device)
    sf = alloc_sf(tokens, ceil_div(hidden, num_per_channels), use_tma_aligned_col_major_sf, use_packed_ue8m0, x.device)
    if tokens:
        names = ('x', 'weight', 'out', 'sf')
        kernel = 'rmsnorm_forward_and_per_token_cast' + ('_f32' if x.dtype == torch.float32 else '')
        if use_packed_ue8m0:
            call(kernel + '_ue8m0', fn, names, x, weight, out, sf, eps, num_per_channels)
        else:
            call(kernel, fn, names, x, weight, out, sf, eps, num_per_channels, round_sf)
    return out, sf


def swiglu_forward_and_per_token_cast(x, fmt: str, num_per_channels: int, pos_to_token_topk=None, topk_weights=None,
                                      pos_to_expert=None, use_tma_aligned_col_major_sf: bool = False,
                                      round_sf: bool = False, use_packed_ue8m0: bool = False,
                                      swiglu_clamp_value: Optional[float] = None, clamped_count=None,
                                      sf_clamp_min: Optional[float] = None):
    """y = silu(min(a, c)) * clamp(b, -c, c) (a, b the halves of each row of x [P, 2H]), times
    topk_weights[pos_to_token_topk[p]] when given; rows with pos_to_expert < 0 are zero; then the
    per-token e4m3 cast (num_per_channels 128, or 0 / H for one scale a row) -> (out, out_sf).
    clamped_count (int64 [3]) accumulates (#a > c, #b > c, #b < -c)."""
    fn = 'tile_kernels.quant.swiglu_forward_and_per_token_cast'
    tensor(x, fn, 'x', (torch.bfloat16,), 2)
    choice(fmt, fn, 'fmt', ('e4m3',))
    integer(num_per_channels, fn, 'num_per_channels', 0)
    _sf_layout(fn, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    if sf_clamp_min is None:
        floor_ = 1e-4  # upstream's e4m3 amax floor
    else:
        if isinstance(sf_clamp_min, bool) or not isinstance(sf_clamp_min, (int, float)):
            raise C.TypeError(f"{fn}: argument 'sf_clamp_min' must be a float or None, got {type(sf_clamp_min).__name__}")
        floor_ = float(sf_clamp_min)
        # the kernel takes it as f32: a value that is not positive and finite there would give an
        # infinite inverse scale on an all-zero group (upstream does not check)
        f32 = torch.tensor(floor_, dtype=torch.float32).item()
        if not (f32 > 0 and f32 != float('inf')):
            raise C.ValueError(f"{fn}: argument 'sf_clamp_min' must be positive and finite in f32, got {sf_clamp_min!r}")
    rows, h2 = x.shape
    if h2 % 2:
        raise C.ValueError(f"{fn}: argument 'x' must have an even width, got {h2}")
    hidden = h2 // 2
    gs = hidden if num_per_channels == 0 else num_per_channels
    dev = x.device
    dummy_i32 = torch.zeros(1, dtype=torch.int32, device=dev)
    use_weights = pos_to_token_topk is not None
    if use_weights:
        tensor(pos_to_token_topk, fn, 'pos_to_token_topk', (torch.int32,), 1)
        tensor(topk_weights, fn, 'topk_weights', (torch.float32,), 2)
        w = topk_weights.reshape(-1)
    else:
        pos_to_token_topk, w = dummy_i32, torch.zeros(1, dtype=torch.float32, device=dev)
    use_mask = pos_to_expert is not None
    if use_mask:
        tensor(pos_to_expert, fn, 'pos_to_expert', (torch.int32,), 1)
    else:
        pos_to_expert = dummy_i32
    use_clamp = swiglu_clamp_value is not None
    if clamped_count is not None:
        if not use_clamp:
            raise C.ValueError(f"{fn}: argument 'clamped_count' needs swiglu_clamp_value")
        tensor(clamped_count, fn, 'clamped_count', (torch.int64,), 1)
        count = clamped_count
    else:
        count = torch.zeros(3, dtype=torch.int64, device=dev)
    out = torch.empty((rows, hidden), dtype=torch.float8_e4m3fn, device=dev)
    sf = alloc_sf(rows, ceil_div(hidden, gs), use_tma_aligned_col_major_sf, use_packed_ue8m0, dev)
    if rows:
        names = ('x', 'pos_to_expert', 'pos_to_token_topk', 'topk_weights', 'out', 'sf', 'clamped_count')
        args = (x, pos_to_expert, pos_to_token_topk, w, out, sf, count, gs,
                float(swiglu_clamp_value) if use_clamp else 0.0, use_clamp, clamped_count is not None, use_mask,
                use_weights)
        if use_packed_ue8m0:
            call('swiglu_forward_and_per_token_cast_ue8m0', fn, names, *args, floor_)
        else:
            call('swiglu_forward_and_per_token_cast', fn, names, *args, round_sf, floor_)
    return out, sf


swiglu_backward_and_per_token_cast = missing('tile_kernels.quant.swiglu_backward_and_per_token_cast',
                                             'no SwiGLU backward in tilestack')
swiglu_forward_and_per_channel_cast_and_transpose = missing(
    'tile_kernels.quant.swiglu_forward_and_per_channel_cast_and_transpose',
    'no per-channel SwiGLU variant in tilestack')


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.quant.{name}', 'not in tilestack')
