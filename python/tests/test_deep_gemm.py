"""deep_gemm on CPU: upstream's accuracy checks (calc_diff against a torch reference, with
upstream's thresholds), the casts bit for bit against torch formulas written here, layouts,
grouped GEMMs, determinism, and argument errors that leave outputs untouched."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import (align, ceil_div, ceil_to_ue8m0, per_block_cast_to_fp8,
                             per_channel_cast_to_fp8, per_token_cast_to_fp4, per_token_cast_to_fp8)

G = torch.Generator().manual_seed(7)


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=G).to(dtype)


# ---- torch references (upstream's formulas; the division by 448 is the multiply by its f32
# reciprocal that torch on CUDA performs, docs/quant.md) ------------------------------------
def ref_per_token(x, use_ue8m0, g):
    m, n = x.shape
    xp = torch.zeros(m, align(n, g), dtype=x.dtype)
    xp[:, :n] = x
    xv = xp.view(m, -1, g)
    sf = xv.abs().float().amax(dim=2).clamp(1e-4) * (1.0 / 448.0)
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    q = (xv * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, -1)[:, :n]
    return q, sf


def ref_per_block(x, use_ue8m0, g):
    m, n = x.shape
    xp = torch.zeros(align(m, g), align(n, g), dtype=x.dtype)
    xp[:m, :n] = x
    xv = xp.view(-1, g, xp.size(1) // g, g)
    sf = xv.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4) * (1.0 / 448.0)
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    q = (xv * (1.0 / sf)).to(torch.float8_e4m3fn).view_as(xp)[:m, :n]
    return q, sf.view(xv.size(0), xv.size(2))


def bits(t):
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize('use_ue8m0', [False, True])
@pytest.mark.parametrize('shape', [(5, 256), (3, 200), (130, 384)])
def test_casts_bit_exact(use_ue8m0, shape):
    x = randn(*shape) * 3
    q, sf = per_token_cast_to_fp8(x, use_ue8m0)
    rq, rsf = ref_per_token(x, use_ue8m0, 128)
    assert torch.equal(bits(q), bits(rq)) and torch.equal(sf, rsf)
    q, sf = per_block_cast_to_fp8(x, use_ue8m0)
    rq, rsf = ref_per_block(x, use_ue8m0, 128)
    assert torch.equal(bits(q), bits(rq)) and torch.equal(sf, rsf)


def test_packed_ue8m0_scales():
    x = randn(4, 512)
    _, sf = per_token_cast_to_fp8(x, True)
    _, packed = per_token_cast_to_fp8(x, True, use_packed_ue8m0=True)
    assert packed.dtype == torch.int32 and packed.shape == (4, 1)
    assert torch.equal(packed, (sf.view(torch.int) >> 23).to(torch.uint8).view(torch.int))


def test_per_channel_and_fp4_shapes():
    x = randn(256, 64)
    q, sf = per_channel_cast_to_fp8(x, False)
    assert q.shape == (256, 64) and sf.shape == (2, 64)
    deq = (q.float().view(2, 128, 64) * sf.view(2, 1, 64)).view(256, 64)
    assert calc_diff(deq, x.float()) < 1e-3
    q4, sf4 = per_token_cast_to_fp4(randn(8, 64), True, gran_k=32)
    assert q4.dtype == torch.int8 and q4.shape == (8, 32) and sf4.shape == (8, 2)


def ref_gemm(a, b, c=None):
    d = a.double() @ b.double().t()
    return d if c is None else d + c.double()


@pytest.mark.parametrize('layout', ['nt', 'nn', 'tn', 'tt'])
@pytest.mark.parametrize('out_dtype,with_c', [(torch.bfloat16, False), (torch.float32, True)])
def test_fp8_gemm_layouts(layout, out_dtype, with_c):
    m, n, k = 40, 256, 384
    a, b = randn(m, k), randn(n, k)
    a_q, b_q = per_token_cast_to_fp8(a, False), per_block_cast_to_fp8(b, False)
    # nn / tn / tt take the transposed operand ([K, N] / [K, M]) with its scales alongside
    if layout[0] == 't':
        a_q = (a_q[0].t(), a_q[1].t())
    if layout[1] == 'n':
        b_q = (b_q[0].t(), b_q[1].t())
    c = randn(m, n, dtype=torch.float32) if with_c else None
    d = torch.empty(m, n, dtype=out_dtype)
    assert getattr(deep_gemm, f'fp8_gemm_{layout}')(a_q, b_q, d, c=c) is None
    assert calc_diff(d, ref_gemm(a, b, c)) < 1e-3  # upstream's FP8 threshold


def test_fp8_fp4_gemm_and_packed_scales():
    m, n, k = 16, 128, 256
    a, b = randn(m, k), randn(n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt(per_token_cast_to_fp8(a, True), per_token_cast_to_fp4(b, True, gran_k=32),
                              d, recipe_a=(1, 128), recipe_b=(1, 32))
    assert calc_diff(d, ref_gemm(a, b)) < 1e-2  # one FP4 operand
    d2 = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(per_token_cast_to_fp8(a, True, use_packed_ue8m0=True),
                          per_token_cast_to_fp8(b, True, use_packed_ue8m0=True), d2)
    assert calc_diff(d2, ref_gemm(a, b)) < 1e-3


@pytest.mark.parametrize('layout', ['nt', 'nn', 'tn', 'tt'])
def test_bf16_gemm(layout):
    m, n, k = 33, 96, 160
    a, b = randn(m, k), randn(n, k)
    aa = a.t().contiguous() if layout[0] == 't' else a  # tn / tt take a as [K, M]
    bb = b.t().contiguous() if layout[1] == 'n' else b  # nn / tt take b as [K, N]
    d = torch.empty(m, n, dtype=torch.float32)
    getattr(deep_gemm, f'bf16_gemm_{layout}')(aa, bb, d)
    assert calc_diff(d, ref_gemm(a, b)) < 1e-5  # upstream's BF16 threshold


def test_batch_invariance_and_thread_count():
    m, n, k = 64, 128, 256
    a, b = randn(m, k), randn(n, k)
    a_q, b_q = per_token_cast_to_fp8(a, False), per_block_cast_to_fp8(b, False)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a_q, b_q, d)
    row = torch.empty(1, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((a_q[0][17:18], a_q[1][17:18]), b_q, row)
    assert torch.equal(bits(row[0]), bits(d[17]))
    old = deep_gemm.get_num_sms()
    try:
        deep_gemm.set_num_sms(1)
        assert deep_gemm.get_num_sms() == 1
        d1 = torch.empty_like(d)
        deep_gemm.fp8_gemm_nt(a_q, b_q, d1)
    finally:
        deep_gemm.set_num_sms(old)
    assert torch.equal(bits(d1), bits(d))


def test_m_grouped_contiguous_and_masked():
    n, k, groups = 128, 256, [128, 0, 256]
    align_m = deep_gemm.get_mk_alignment_for_contiguous_layout()
    b = randn(len(groups), n, k)
    b_q = [per_block_cast_to_fp8(b[g], False) for g in range(len(groups))]
    b_q = (torch.stack([q for q, _ in b_q]), torch.stack([s for _, s in b_q]))
    m_sum = sum(groups) + align_m  # plus one padding block (-1)
    a = randn(m_sum, k)
    m_indices = torch.full((m_sum,), -1, dtype=torch.int32)
    start = align_m
    for g, mg in enumerate(groups):
        m_indices[start:start + mg] = g
        start += mg
    d = torch.full((m_sum, n), 7.0, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(per_token_cast_to_fp8(a, False), b_q, d, m_indices)
    assert torch.all(d[:align_m] == 7.0)  # the -1 block is skipped, not written
    start = align_m
    for g, mg in enumerate(groups):
        if mg:
            assert calc_diff(d[start:start + mg], ref_gemm(a[start:start + mg], b[g])) < 1e-3
        start += mg
    # masked: rows at or past masked_m[g] keep their old contents
    m_max = 64
    a3 = randn(len(groups), m_max, k)
    a3_q = [per_token_cast_to_fp8(a3[g], False) for g in range(len(groups))]
    a3_q = (torch.stack([q for q, _ in a3_q]), torch.stack([s for _, s in a3_q]))
    masked_m = torch.tensor([64, 0, 10], dtype=torch.int32)
    d3 = torch.full((len(groups), m_max, n), 7.0, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_gemm_nt_masked(a3_q, b_q, d3, masked_m, expected_m=32)
    for g in range(len(groups)):
        mm = int(masked_m[g])
        assert torch.all(d3[g, mm:] == 7.0)
        if mm:
            assert calc_diff(d3[g, :mm], ref_gemm(a3[g, :mm], b[g])) < 1e-3


def test_m_grouped_bf16_masked():
    a, b = randn(2, 16, 64), randn(2, 32, 64)
    d = torch.zeros(2, 16, 32, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor([16, 5], dtype=torch.int32), 8)
    assert calc_diff(d[0], ref_gemm(a[0], b[0])) < 1e-5 and calc_diff(d[1, :5], ref_gemm(a[1, :5], b[1])) < 1e-5
    assert torch.all(d[1, 5:] == 0)


def test_calc_diff_matches_formula():
    x, y = torch.randn(100, generator=G), torch.randn(100, generator=G)
    x64, y64 = x.double(), y.double()
    ref = 1 - 2 * (x64 * y64).sum() / (x64 * x64 + y64 * y64).sum()
    assert abs(calc_diff(x, y) - float(ref)) < 1e-12
    assert calc_diff(torch.zeros(3), torch.zeros(3)) == 0


def test_errors_leave_output_untouched():
    m, n, k = 8, 128, 128
    a_q = per_token_cast_to_fp8(randn(m, k), False)
    b_q = per_block_cast_to_fp8(randn(n, k), False)
    d = torch.full((m, n), 3.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match='sfa') as e:
        deep_gemm.fp8_gemm_nt((a_q[0], a_q[1][:, :0]), b_q, d)
    assert isinstance(e.value, RuntimeError)  # as upstream's host asserts
    with pytest.raises(TypeError):
        deep_gemm.fp8_gemm_nt((a_q[0].bfloat16(), a_q[1]), b_q, d)
    with pytest.raises(ValueError):
        deep_gemm.fp8_gemm_nt(a_q, b_q, torch.full((m, n + 1), 3.0, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="'d' is None"):
        deep_gemm.fp8_gemm_nt(a_q, b_q, None)
    with pytest.raises(TypeError, match="'a' must be a"):
        deep_gemm.fp8_gemm_nt(a_q[0], b_q, d)
    with pytest.raises(ValueError, match="'b' must be a CPU tensor"):
        deep_gemm.fp8_gemm_nt(a_q, (b_q[0].to('meta'), b_q[1]), d)
    with pytest.raises(ValueError, match='recipe'):
        deep_gemm.fp8_gemm_nt(a_q, b_q, d, recipe=(1, 128))
    dt = torch.full((n, m), 3.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r'\bd\b.*contiguous'):
        deep_gemm.fp8_gemm_nt(a_q, b_q, dt.t())  # d must be N-major (contiguous last dim)
    assert torch.all(dt == 3.0)
    assert torch.all(d == 3.0)


def test_output_written_in_place():
    a, b = randn(4, 64), randn(8, 64)
    big = torch.zeros(4, 16, dtype=torch.float32)
    d = big[:, 4:12]  # a strided view: results must land in the caller's storage
    deep_gemm.bf16_gemm_nt(a, b, d)
    assert torch.all(big[:, :4] == 0) and torch.all(big[:, 12:] == 0)
    assert calc_diff(big[:, 4:12], ref_gemm(a, b)) < 1e-5


def test_runtime_knobs():
    deep_gemm.set_tc_util(0)
    assert deep_gemm.get_tc_util() == 100
    deep_gemm.set_pdl(True)
    assert deep_gemm.get_pdl() is True
    deep_gemm.set_pdl(False)
    with pytest.raises(ValueError):
        deep_gemm.set_num_sms(-1)
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(64) == 128
    assert ceil_div(257, 128) == 3
