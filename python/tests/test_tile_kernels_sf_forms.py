"""The input and scale forms of tile_kernels bound after the first pass, against torch references
written here: cast_back of FP8 data with packed UE8M0 scales (column-major and row-major words),
rmsnorm_forward_and_per_token_cast with f32 x, and moe.expand_to_fused_with_sf (f32 row-major,
f32 column-major and packed UE8M0 scales), plus their argument errors (raised before anything
is allocated or written)."""
import pytest
import torch

from tile_kernels import moe, quant
from test_tile_kernels import G, align, f32_bits, pack_ue8m0, randn, ref_per_token_cast, same_bits


def unpack_scales(words, groups):
    """packed UE8M0 int32 [R, W] -> f32 2^(e - 127) [R, groups] (byte 0 -> 0), decoded in torch."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    by = torch.stack([(w >> (8 * k)) & 255 for k in range(4)], -1).reshape(words.shape[0], -1)[:, :groups]
    return f32_bits(by << 23)


# ---- cast_back: FP8 data, packed UE8M0 scales ----

@pytest.mark.parametrize('fmt', ['bf16', 'fp32'])
@pytest.mark.parametrize('gs', [32, 128])
def test_cast_back_fp8_packed_round_trip(fmt, gs):
    t, h = 37, 1312  # a partial last 1024-chunk and a partial last word
    x = randn(t, h, scale=3.0)
    q, sf = quant.per_token_cast(x, 'e4m3', gs, use_tma_aligned_col_major_sf=True, round_sf=True,
                                 use_packed_ue8m0=True)
    assert sf.dtype == torch.int32 and sf.stride() == (1, align(t, 4))
    out = quant.cast_back((q, sf), fmt, (1, gs))
    s = unpack_scales(sf, (h + gs - 1) // gs).repeat_interleave(gs, 1)[:, :h]
    ref = (q.float() * s).to(torch.bfloat16 if fmt == 'bf16' else torch.float32)
    assert same_bits(out, ref) and out.is_contiguous()
    # the packed path and the f32 path agree on the same scales
    f32 = quant.cast_back((q, unpack_scales(sf, (h + gs - 1) // gs)), fmt, (1, gs))
    assert same_bits(out, f32)
    # and the round trip is within the e4m3 step of the input
    back = quant.per_token_cast_back((q, sf), 'fp32', gs)
    assert ((back - x.float()).abs() <= x.float().abs() * 2.0 ** -4 + s * 2.0 ** -9).all()


@pytest.mark.parametrize('block', [(128, 128), (1, 64)])
def test_cast_back_fp8_packed_blocks_and_row_major_words(block):
    t, h = 150, 640
    bh, bw = block
    q = randn(t, h, scale=50).float().clamp(-448, 448).to(torch.float8_e4m3fn)
    sm, sn = (t + bh - 1) // bh, (h + bw - 1) // bw
    e = torch.randint(100, 150, (sm, sn), generator=G)
    e[0, 0] = 0  # a zero scale
    words = pack_ue8m0(e)  # row-major contiguous: any strides are read
    out = quant.cast_back((q, words), 'fp32', block)
    full = f32_bits(e << 23).repeat_interleave(bh, 0)[:t].repeat_interleave(bw, 1)[:, :h]
    assert same_bits(out, q.float() * full)
    col = torch.empty((words.shape[1], align(sm, 4)), dtype=torch.int32)[:, :sm].T
    col.copy_(words)
    assert same_bits(quant.cast_back((q, col), 'fp32', block), out)


def test_cast_back_fp8_packed_errors():
    q = torch.zeros(4, 128).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match='sf must be'):
        quant.cast_back((q, torch.zeros(4, 2, dtype=torch.int32)), 'bf16', (1, 32))  # 4 groups fit one word
    with pytest.raises(ValueError, match='multiple of 32'):
        quant.cast_back((q, torch.zeros(4, 2, dtype=torch.int32)), 'bf16', (1, 16))


# ---- rmsnorm_forward_and_per_token_cast: f32 x ----

@pytest.mark.parametrize('gs', [128, 512])
@pytest.mark.parametrize('layout', [(False, False, False), (False, True, False), (True, True, True)])
def test_rmsnorm_forward_and_per_token_cast_f32(gs, layout):
    col, round_sf, packed = layout
    kw = dict(use_tma_aligned_col_major_sf=col, round_sf=round_sf, use_packed_ue8m0=packed)
    x = randn(17, 512, dtype=torch.float32, scale=2.0)
    w = randn(512, dtype=torch.float32)
    out, sf = quant.rmsnorm_forward_and_per_token_cast(x, w, 1e-6, 'e4m3', gs, **kw)
    rstd = 1 / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6)
    y = (x.double() * rstd) * w.double()
    ry, rsf = ref_per_token_cast(y.float(), 'e4m3', gs, round_sf, packed)
    mismatch = (out.view(torch.uint8) != ry.view(torch.uint8)).float().mean()
    assert mismatch < 0.01  # the kernel's fixed sum order against float64's (as the bf16 test)
    assert out.dtype == torch.float8_e4m3fn and sf.shape == rsf.shape and sf.dtype == rsf.dtype
    if col:
        assert sf.stride() == (1, align(17, 4))
    # bf16-exact f32 inputs: the f32 kernel gives the bf16 kernel's bytes
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    o32, s32 = quant.rmsnorm_forward_and_per_token_cast(xb.float(), wb.float(), 1e-6, 'e4m3', gs, **kw)
    o16, s16 = quant.rmsnorm_forward_and_per_token_cast(xb, wb, 1e-6, 'e4m3', gs, **kw)
    assert same_bits(o32, o16) and same_bits(s32, s16)


def test_rmsnorm_f32_weight_dtype_must_match():
    x = torch.zeros(2, 128)
    with pytest.raises(TypeError, match="'weight'"):
        quant.rmsnorm_forward_and_per_token_cast(x, torch.zeros(128, dtype=torch.bfloat16), 1e-6, 'e4m3', 128)


# ---- moe.expand_to_fused_with_sf ----

SF_LAYOUTS = [(128, False, False), (128, True, False), (32, True, True), (128, True, True)]  # (gs, col, packed)


@pytest.mark.parametrize('layout', SF_LAYOUTS)
def test_expand_to_fused_with_sf(layout):
    gs, col, packed = layout
    t, k, e, h = 37, 3, 8, 1100
    idx = torch.randint(-1, e, (t, k), generator=G)
    p2e, p2t, _, ttp, *_ = moe.get_fused_mapping(idx, e, 0, 16)
    x = randn(t, h, scale=3.0)
    q, sf = quant.per_token_cast(x, 'e4m3', gs, use_tma_aligned_col_major_sf=col, round_sf=packed,
                                 use_packed_ue8m0=packed)
    out, osf = moe.expand_to_fused_with_sf((q, sf), gs, ttp, p2e, use_tma_aligned_col_major_sf=col)
    rows = p2e.shape[0]
    hit = (p2t >= 0)[:, None]
    src = p2t.clamp(min=0).long()
    ref = torch.where(hit, q.view(torch.uint8)[src], torch.zeros((), dtype=torch.uint8))
    rsf = torch.where(hit, sf.contiguous()[src], torch.zeros((), dtype=sf.dtype))
    assert out.dtype == torch.float8_e4m3fn and out.shape == (rows, h)
    assert torch.equal(out.view(torch.uint8), ref)
    assert osf.dtype == sf.dtype and osf.shape == (rows, sf.shape[1]) and same_bits(osf, rsf)
    if col:
        assert osf.stride() == (1, align(rows, 4))
    else:
        assert osf.is_contiguous()


def test_expand_to_fused_with_sf_every_slot():
    # the positions a hand-made token_topk_to_pos names, -1 slots skipped, unnamed rows zero
    q = torch.arange(3 * 64, dtype=torch.int32).remainder(120).to(torch.float32).reshape(3, 64).to(torch.float8_e4m3fn)
    sf = torch.tensor([[1.5], [2.5], [3.5]])
    ttp = torch.tensor([[2, -1], [0, 4], [5, 1]], dtype=torch.int32)
    p2e = torch.tensor([0, 0, 1, -1, 1, 2, -1], dtype=torch.int32)
    out, osf = moe.expand_to_fused_with_sf((q, sf), 128, ttp, p2e)
    src = {2: 0, 0: 1, 4: 1, 5: 2, 1: 2}
    for p in range(7):
        if p in src:
            assert torch.equal(out[p].view(torch.uint8), q[src[p]].view(torch.uint8)) and osf[p, 0] == sf[src[p], 0]
        else:
            assert not out[p].view(torch.uint8).any() and osf[p, 0] == 0


def test_expand_to_fused_with_sf_errors():
    q = torch.zeros(4, 256).to(torch.float8_e4m3fn)
    ttp = torch.zeros(4, 2, dtype=torch.int32)
    p2e = torch.zeros(8, dtype=torch.int32)
    f32 = torch.zeros(4, 2)
    cases = [
        (lambda: moe.expand_to_fused_with_sf((q, f32), 64, ttp, p2e), ValueError, 'num_per_channels'),
        (lambda: moe.expand_to_fused_with_sf((q, torch.zeros(4, 1, dtype=torch.int32)), 128, ttp, p2e),
         ValueError, 'use_tma_aligned_col_major_sf'),
        (lambda: moe.expand_to_fused_with_sf((q, torch.zeros(4, 3)), 128, ttp, p2e), ValueError, "'x_sf'"),
        (lambda: moe.expand_to_fused_with_sf((q.float(), f32), 128, ttp, p2e), TypeError, "'x'"),
        (lambda: moe.expand_to_fused_with_sf((q, f32.double()), 128, ttp, p2e), TypeError, "'x_sf'"),
        (lambda: moe.expand_to_fused_with_sf((q, f32), 128, ttp[:3], p2e), ValueError, 'token_topk_to_pos'),
        (lambda: moe.expand_to_fused_with_sf((q, f32), 128, ttp + 8, p2e), ValueError, 'token_topk_to_pos'),
        (lambda: moe.expand_to_fused_with_sf(q, 128, ttp, p2e), TypeError, "'x'"),
    ]
    for f, cls, what in cases:
        with pytest.raises(cls, match=what):
            f()


# ---- moe.reduce_fused: f32 x, row scales, FP8 output, global sf ----

def mapping(t=37, k=3, e=8):
    idx = torch.randint(-1, e, (t, k), generator=G)
    p2e, p2t, _, ttp, *_ = moe.get_fused_mapping(idx, e, 0, 16)
    return p2e.shape[0], ttp


def ref_reduce(x, w, ttp):
    """float64 sum over k of x[pos] * w (the kernel: an f32 fma chain, so within f32 rounding)."""
    acc = torch.zeros(ttp.shape[0], x.shape[1], dtype=torch.float64)
    mag = torch.zeros_like(acc)
    for kk in range(ttp.shape[1]):
        m = (ttp[:, kk] >= 0)[:, None]
        term = torch.where(m, x[ttp[:, kk].clamp(min=0).long()].double() * w[:, kk:kk + 1].double(), 0.0)
        acc, mag = acc + term, mag + term.abs()
    return acc, mag


def test_reduce_fused_f32():
    rows, ttp = mapping()
    x = randn(rows, 300, dtype=torch.float32, scale=2.0)  # 300: a partial 512-chunk
    w = torch.rand(ttp.shape, generator=G)
    y = moe.reduce_fused(x, w, ttp)
    assert y.dtype == torch.float32 and y.shape == (ttp.shape[0], 300)
    acc, mag = ref_reduce(x, w, ttp)
    assert ((y.double() - acc).abs() <= mag * 2.0 ** -21).all()  # three f32 roundings at most
    # weights None = 1, and a given out is written and returned
    out = torch.empty_like(y)
    assert moe.reduce_fused(x, None, ttp, out=out) is out
    assert same_bits(out, moe.reduce_fused(x, torch.ones(ttp.shape), ttp))


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float32])
def test_reduce_fused_row_scales(dtype):
    rows, ttp = mapping()
    x = randn(rows, 512, dtype=dtype)
    x_sf = torch.rand(rows, generator=G) + 0.5
    w = torch.rand(ttp.shape, generator=G)
    y = moe.reduce_fused((x, x_sf), w, ttp)
    # the kernel folds the row's scale into the weight (one f32 multiply): the same as passing
    # the folded weights
    folded = torch.where(ttp >= 0, w * x_sf[ttp.clamp(min=0).long()], w)
    assert y.dtype == dtype and same_bits(y, moe.reduce_fused(x, folded, ttp))
    acc, mag = ref_reduce(x, folded, ttp)
    tol = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -21
    assert ((y.double() - acc).abs() <= mag * tol + acc.abs() * tol).all()


@pytest.mark.parametrize('with_sf', [False, True])
@pytest.mark.parametrize('with_x_sf', [False, True])
def test_reduce_fused_e4m3(with_sf, with_x_sf):
    rows, ttp = mapping()
    x = randn(rows, 700, dtype=torch.float32, scale=300.0)
    x_sf = torch.rand(rows, generator=G) + 0.5
    w = torch.rand(ttp.shape, generator=G)
    sf = torch.tensor([0.75]) if with_sf else None
    arg = (x, x_sf) if with_x_sf else x
    q = moe.reduce_fused(arg, w, ttp, fp8_format='e4m3', sf=sf)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (ttp.shape[0], 700)
    # the f32 output times sf, saturated to +-448, then RNE to e4m3 (torch's conversion)
    acc = moe.reduce_fused(arg, w, ttp)
    v = acc * sf[0] if with_sf else acc
    assert (v.abs() > 448).any()  # the saturation is exercised
    assert same_bits(q, v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn))
    # bf16 x takes the same fma chain as its exact f32 widening
    xb = x.to(torch.bfloat16)
    argb, argf = ((xb, x_sf), (xb.float(), x_sf)) if with_x_sf else (xb, xb.float())
    assert same_bits(moe.reduce_fused(argb, w, ttp, 'e4m3', sf), moe.reduce_fused(argf, w, ttp, 'e4m3', sf))


def test_reduce_fused_errors():
    rows, ttp = mapping(t=4, k=2)
    x = torch.zeros(rows, 256)
    w = torch.ones(ttp.shape)
    cases = [
        (lambda: moe.reduce_fused(x, w, ttp, sf=torch.ones(1)), ValueError, "'sf'"),
        (lambda: moe.reduce_fused(x, w, ttp, fp8_format='e5m2'), ValueError, 'fp8_format'),
        (lambda: moe.reduce_fused(x, w, ttp, 'e4m3', torch.ones(2)), ValueError, "'sf'"),
        (lambda: moe.reduce_fused((x, torch.ones(rows + 1)), w, ttp), ValueError, "'x_sf'"),
        (lambda: moe.reduce_fused((x, torch.ones(rows, dtype=torch.float64)), w, ttp), TypeError, "'x_sf'"),
        (lambda: moe.reduce_fused(x.double(), w, ttp), TypeError, "'x'"),
        (lambda: moe.reduce_fused(x, w, ttp, 'e4m3', out=torch.empty(4, 256)), TypeError, "'out'"),
        (lambda: moe.reduce_fused(x, w, ttp, out=torch.empty(3, 256)), ValueError, "'out'"),
    ]
    for f, cls, what in cases:
        with pytest.raises(cls, match=what):
            f()


# ---- per_token_cast re-quantising with input and output scales in different formats ----

@pytest.mark.parametrize('fmt', ['e4m3', 'e2m1'])
@pytest.mark.parametrize('out_layout', [(False, False), (True, False), (True, True)])  # (col, round_sf)
def test_per_token_cast_packed_input_f32_output(fmt, out_layout):
    col, round_sf = out_layout
    x = randn(33, 640, scale=4.0)
    xq, xsf = quant.per_token_cast(x, 'e4m3', 128, use_tma_aligned_col_major_sf=True, round_sf=True,
                                   use_packed_ue8m0=True)
    out, sf = quant.per_token_cast((xq, xsf), fmt, 32, x_block_size=(1, 128), use_tma_aligned_col_major_sf=col,
                                   round_sf=round_sf)
    rd, rsf = ref_per_token_cast(xq, fmt, 32, round_sf, False, x_sf=unpack_scales(xsf, 5), x_block=(1, 128))
    assert same_bits(out, rd) and same_bits(sf, rsf) and sf.dtype == torch.float32
    if round_sf:  # the same codes and exponents as the packed-to-packed kernel
        pout, psf = quant.per_token_cast((xq, xsf), fmt, 32, x_block_size=(1, 128), use_tma_aligned_col_major_sf=True,
                                         round_sf=True, use_packed_ue8m0=True)
        assert same_bits(pout, out) and same_bits(unpack_scales(psf, 20), sf)


@pytest.mark.parametrize('fmt', ['e4m3', 'e2m1'])
@pytest.mark.parametrize('block', [(1, 128), (128, 128)])
def test_per_token_cast_f32_input_packed_output(fmt, block):
    x = randn(150, 640, scale=4.0)
    xq = (x.float() / 4).to(torch.float8_e4m3fn)
    nm, nk = (150 + block[0] - 1) // block[0], 5
    xsf = torch.rand(nm, nk, generator=G) * 8 + 0.1
    out, sf = quant.per_token_cast((xq, xsf), fmt, 64, x_block_size=block, use_tma_aligned_col_major_sf=True,
                                   round_sf=True, use_packed_ue8m0=True)
    rd, rsf = ref_per_token_cast(xq, fmt, 64, True, True, x_sf=xsf, x_block=block)
    assert same_bits(out, rd) and same_bits(sf, rsf)
    assert sf.dtype == torch.int32 and sf.stride() == (1, align(150, 4))
