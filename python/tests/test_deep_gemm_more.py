"""The rest of deep_gemm's bound surface against torch references: fp4 helpers bit for bit,
einsum, the mHC pre-norm GEMM, skip-head-mid, grouped bf16 and k-grouped GEMMs, and the GIL
being released while a kernel runs."""
import sys
import threading
import time

import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import (cast_back_from_fp4, per_block_cast_to_fp8, per_channel_cast_to_fp8,
                             per_token_cast_to_fp4, per_token_cast_to_fp8, transpose_packed_fp4)

G = torch.Generator().manual_seed(11)
FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=G).to(dtype)


def unpack_fp4_codes(p):
    m, n2 = p.shape
    codes = torch.empty(m, n2 * 2, dtype=torch.int8)
    codes[:, 0::2], codes[:, 1::2] = p & 0x0F, (p >> 4) & 0x0F
    return codes


def test_transpose_packed_fp4_bit_exact():
    q, _ = per_token_cast_to_fp4(randn(6, 10), False, gran_k=32)
    t = transpose_packed_fp4(q)
    codes = unpack_fp4_codes(q).t().contiguous()
    ref = (codes[:, 0::2] & 0x0F) | ((codes[:, 1::2] & 0x0F) << 4)
    assert t.shape == (10, 3) and torch.equal(t, ref)


def test_cast_back_from_fp4_bit_exact():
    x = randn(4, 64) * 5
    q, sf = per_token_cast_to_fp4(x, True, gran_k=32)
    out = cast_back_from_fp4(q, sf, gran_k=32)
    codes = unpack_fp4_codes(q).to(torch.int64)
    mag = FP4[codes & 7]
    val = torch.where(((codes & 8) != 0) & ((codes & 7) != 0), -mag, mag)
    ref = val * sf[:, torch.arange(64) // 32]
    assert torch.equal(out, ref)
    assert calc_diff(out, x.float()) < 2e-2
    _, packed = per_token_cast_to_fp4(x, True, gran_k=32, use_packed_ue8m0=True)
    assert torch.equal(cast_back_from_fp4(q, packed, gran_k=32, use_packed_ue8m0=True), ref)


def test_einsum_bhr_hdr_bhd():
    a, b = randn(3, 4, 64), randn(4, 32, 64)
    d = torch.empty(3, 4, 32, dtype=torch.bfloat16)
    deep_gemm.einsum('bhr,hdr->bhd', a, b, d)
    assert calc_diff(d, torch.einsum('bhr,hdr->bhd', a.double(), b.double())) < 1e-5


def test_tf32_hc_prenorm_gemm():
    m, n, k = 7, 24, 320
    a, b = randn(m, k), randn(n, k, dtype=torch.float32)
    b_tf32 = (b.view(torch.int32) & ~0x1FFF).view(torch.float32)  # tf32 keeps 10 mantissa bits
    d, s = torch.empty(m, n), torch.empty(m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s)
    assert calc_diff(d, a.double() @ b_tf32.double().t()) < 1e-8  # upstream's threshold
    assert calc_diff(s, (a.double() ** 2).sum(1)) < 1e-8
    d2, s2 = torch.empty(2, m, n), torch.empty(2, m)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d2, s2, num_splits=2)
    assert calc_diff(d2.sum(0), d) < 1e-10 and calc_diff(s2.sum(0), s) < 1e-10


def test_skip_head_mid_matches_dense_columns():
    m, k, left, mid, right, heads = 5, 256, 64, 32, 64, 2
    n = heads * (left + right)
    a_q = per_token_cast_to_fp8(randn(m, k), False)
    b_q = per_block_cast_to_fp8(randn(n, k), False)
    dense = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(a_q, b_q, dense)
    d = torch.full((m, n + heads * mid), 9.0, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt_skip_head_mid(a_q, b_q, d, (left, mid, right))
    w = left + mid + right
    for h in range(heads):
        assert torch.equal(d[:, h * w:h * w + left], dense[:, h * (left + right):h * (left + right) + left])
        assert torch.all(d[:, h * w + left:h * w + left + mid] == 9.0)
        assert torch.equal(d[:, h * w + left + mid:(h + 1) * w],
                           dense[:, h * (left + right) + left:(h + 1) * (left + right)])


def test_m_grouped_bf16_contiguous():
    n, k, align_m = 32, 64, deep_gemm.get_mk_alignment_for_contiguous_layout()
    a, b = randn(2 * align_m, k), randn(2, n, k)
    m_indices = torch.tensor([1] * align_m + [0] * align_m, dtype=torch.int32)
    d = torch.empty(2 * align_m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    assert calc_diff(d[:align_m], a[:align_m].double() @ b[1].double().t()) < 1e-5
    assert calc_diff(d[align_m:], a[align_m:].double() @ b[0].double().t()) < 1e-5


def test_k_grouped_gemms():
    m, n, ks = 16, 32, [128, 256]
    a, b = randn(sum(ks), m), randn(sum(ks), n)
    c = randn(len(ks), m, n, dtype=torch.float32)
    ref = c.double().clone()
    s = 0
    for g, kg in enumerate(ks):
        ref[g] += a[s:s + kg].double().t() @ b[s:s + kg].double()
        s += kg
    d = c.clone()
    deep_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c=d)
    assert calc_diff(d, ref) < 1e-5
    # fp8: per-channel scales along K (one per 128 K rows), powers of two as upstream's tn
    a_q, b_q = per_channel_cast_to_fp8(a, True), per_channel_cast_to_fp8(b, True)
    d8 = c.clone()
    deep_gemm.k_grouped_fp8_gemm_tn_contiguous(a_q, b_q, d8, ks, c=d8)
    assert calc_diff(d8, ref) < 1e-3


def test_gil_released_while_kernel_runs():
    # No clock involved: with the switch interval made huge, the worker thread keeps the GIL
    # until it blocks. If the binding held the GIL through the C call, the main thread could
    # only wake after the call returned and the worker had set `done`; with the GIL released,
    # it wakes while the kernel runs (a GEMM of ~0.1 s here) and sees `done` still False.
    a, b = randn(512, 2048), randn(2048, 2048)
    a_q, b_q = per_token_cast_to_fp8(a, False), per_block_cast_to_fp8(b, False)
    d = torch.empty(512, 2048, dtype=torch.bfloat16)
    started, state = threading.Event(), {"done": False}

    def worker():
        started.set()
        deep_gemm.fp8_gemm_nt(a_q, b_q, d)
        state["done"] = True

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        th = threading.Thread(target=worker)
        th.start()
        started.wait()
        seen_during_call = not state["done"]
        th.join()
    finally:
        sys.setswitchinterval(old)
    assert state["done"] and seen_during_call
