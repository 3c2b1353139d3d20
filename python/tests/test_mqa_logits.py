"""deep_gemm.fp8_fp4_mqa_logits / fp8_mqa_logits against a float64 torch reference on the
dequantised inputs (upstream's "simulated" check, < 5e-6), exact -inf masks, 20 bitwise-equal
reruns, and upstream's padded logits view."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_token_cast_to_fp8

G = torch.Generator().manual_seed(5)


def make(s=9, s_kv=300, h=4, d=64):
    q = torch.randn(s, h, d, generator=G).to(torch.float8_e4m3fn)
    kv_fp8, kv_sf = per_token_cast_to_fp8(torch.randn(s_kv, d, generator=G).bfloat16(), False, gran_k=d)
    kv_sf = kv_sf[:, 0].contiguous()
    w = torch.randn(s, h, generator=G)
    ks = torch.randint(0, s_kv // 2, (s,), generator=G, dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(1, s_kv, (s,), generator=G, dtype=torch.int32),
                       torch.tensor(s_kv, dtype=torch.int32))
    return q, kv_fp8, kv_sf, w, ks, ke


def reference(q, kv, kv_sf, w, ks, ke):
    dots = torch.einsum('shd,jd->shj', q.double(), kv.double()).clamp_min(0)
    logits = (dots * w.double()[:, :, None]).sum(1) * kv_sf.double()[None, :]
    j = torch.arange(kv.shape[0])[None, :]
    mask = (j >= ks[:, None]) & (j < ke[:, None])
    return logits.masked_fill(~mask, float('-inf')), mask


@pytest.mark.parametrize('legacy', [False, True])
def test_mqa_logits_against_reference(legacy):
    q, kv, kv_sf, w, ks, ke = make()
    if legacy:
        out = deep_gemm.fp8_mqa_logits(q, (kv, kv_sf), w, ks, ke)
    else:
        out = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks, ke)
    ref, mask = reference(q, kv, kv_sf, w, ks, ke)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert out.stride(1) == 1 and out.stride(0) * 4 % 1024 == 0  # upstream's padded rows
    assert torch.equal(torch.isneginf(out), ~mask)
    assert calc_diff(out[mask], ref[mask]) < 5e-6
    for _ in range(20):
        again = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks, ke)
        assert torch.equal(again.view(torch.int32), out.view(torch.int32))


def test_mqa_logits_compressed_and_errors():
    q, kv, kv_sf, w, ks, ke = make()
    msk = int((ke - ks).max())
    out = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks, ke, clean_logits=False,
                                       max_seqlen_k=msk)
    ref, _ = reference(q, kv, kv_sf, w, ks, ke)
    for i in range(q.shape[0]):
        n = int(ke[i] - ks[i])
        assert calc_diff(out[i, :n], ref[i, int(ks[i]):int(ke[i])]) < 5e-6
    with pytest.raises(TypeError, match="'kv' must be a"):
        deep_gemm.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke)
    with pytest.raises(TypeError):
        deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w, ks.long(), ke)
    with pytest.raises(ValueError):
        deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), w[:, :2], ks, ke)


def make_paged(b=3, next_n=2, h=8, d=64, block_kv=64, max_len=300):
    q = torch.randn(b, next_n, h, d, generator=G).to(torch.float8_e4m3fn)
    w = torch.randn(b * next_n, h, generator=G)
    ctx = torch.randint(1, max_len + 1, (b, next_n), generator=G, dtype=torch.int32)
    ctx[0, 0] = max_len
    max_blocks = (max_len + block_kv - 1) // block_kv
    num_blocks = b * max_blocks + 2
    block_table = torch.randperm(num_blocks, generator=G)[:b * max_blocks].view(b, max_blocks).int()
    kv = torch.randn(num_blocks, block_kv, d, generator=G).to(torch.float8_e4m3fn)
    kv_sf = torch.rand(num_blocks, block_kv, generator=G) + 0.5
    # the fused cache: per block, block_kv token vectors, then block_kv 4-byte scales
    fused = torch.cat([kv.view(torch.uint8).view(num_blocks, -1),
                       kv_sf.view(torch.uint8).view(num_blocks, -1)], dim=1)
    kv_cache = fused.view(num_blocks, block_kv, 1, d + 4)
    return q, w, ctx, block_table, kv, kv_sf, kv_cache, max_len


def test_paged_mqa_logits_against_reference():
    q, w, ctx, bt, kv, kv_sf, kv_cache, max_len = make_paged()
    num_sms = deep_gemm.get_num_sms()
    meta = deep_gemm.get_paged_mqa_logits_metadata(ctx, 64, num_sms)
    assert meta.shape == (num_sms + 1, 2) and meta.dtype == torch.int32
    out = deep_gemm.fp8_fp4_paged_mqa_logits((q, None), kv_cache, w, ctx, bt, meta, max_len)
    legacy = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, ctx, bt, meta, max_len)
    assert out.shape == (6, max_len) and out.stride(0) * 4 % 1024 == 0
    b, next_n = ctx.shape
    for i in range(b):
        for t in range(next_n):
            n = int(ctx[i, t])
            p = torch.arange(n)
            blocks = bt[i, p // 64].long()
            keys = kv[blocks, p % 64].double()
            dots = (q[i, t].double() @ keys.t()).clamp_min(0)
            ref = (dots * w[i * next_n + t].double()[:, None]).sum(0) * kv_sf[blocks, p % 64].double()
            row = i * next_n + t
            assert calc_diff(out[row, :n], ref) < 5e-6
            assert torch.equal(legacy[row, :n], out[row, :n])
    with pytest.raises(ValueError, match='next_n = 1'):  # varlen rows are single tokens, as upstream
        deep_gemm.get_paged_mqa_logits_metadata(ctx, 64, num_sms, indices=torch.zeros(b, dtype=torch.int32))
    with pytest.raises(ValueError):
        deep_gemm.get_paged_mqa_logits_metadata(ctx[0], 64, num_sms)  # 2-D only, as upstream


@pytest.mark.parametrize('fp4', [False, True])
def test_paged_mqa_logits_varlen(fp4):
    """SM100's varlen mode (upstream's test: sequences of 1..n tokens flattened into rows with
    next_n = 1, indices = the sequence of each row, context_lens growing by one per token):
    every row against a float64 reference over its sequence's keys. Rows past a sequence's first
    carry a different (wrong) block-table row: upstream's scheduler reads the first row's."""
    from deep_gemm.utils import cast_back_from_fp4, per_token_cast_to_fp4
    seqs, h, d, block_kv, max_len = 4, 8, 64, 32, 200
    tokens = torch.tensor([3, 1, 4, 2])
    indices = torch.arange(seqs, dtype=torch.int32).repeat_interleave(tokens)
    rows = int(tokens.sum())
    seq_ctx = torch.randint(1, max_len - 4, (seqs,), generator=G, dtype=torch.int32)
    offset = torch.cat([torch.arange(int(n)) for n in tokens]).int()
    ctx = (seq_ctx.repeat_interleave(tokens) + offset).view(rows, 1)
    max_blocks = (max_len + block_kv - 1) // block_kv
    num_blocks = (seqs + rows) * max_blocks
    perm = torch.randperm(num_blocks, generator=G).int()
    seq_table = perm[:seqs * max_blocks].view(seqs, max_blocks)
    bt = seq_table.repeat_interleave(tokens, dim=0).clone()
    first = torch.ones(rows, dtype=torch.bool)
    first[1:] = indices[1:] != indices[:-1]
    bt[~first] = perm[seqs * max_blocks:seqs * max_blocks + int((~first).sum()) * max_blocks].view(-1, max_blocks)
    x = torch.randn(num_blocks, block_kv, d, generator=G)
    qf = torch.randn(rows, 1, h, d, generator=G)
    if fp4:
        kv_q, kv_sf = per_token_cast_to_fp4(x.view(-1, d), use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
        keys_all = cast_back_from_fp4(kv_q, kv_sf, gran_k=32, use_packed_ue8m0=True).view(num_blocks, block_kv, d)
        q_q, q_sf = per_token_cast_to_fp4(qf.view(-1, d), use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
        q_deq = cast_back_from_fp4(q_q, q_sf, gran_k=32, use_packed_ue8m0=True).view(rows, 1, h, d)
        q_in = (q_q.view(rows, 1, h, d // 2), q_sf.view(rows, 1, h))
        data, scale, k_scale = kv_q.view(torch.uint8), kv_sf.view(torch.uint8), torch.ones(num_blocks, block_kv)
    else:
        kv_q = x.to(torch.float8_e4m3fn)
        keys_all, k_scale = kv_q.float(), torch.rand(num_blocks, block_kv, generator=G) + 0.5
        q_in = (qf.to(torch.float8_e4m3fn), None)
        q_deq = q_in[0].float()
        data, scale = kv_q.view(torch.uint8), k_scale.view(torch.uint8)
    width = data.numel() // (num_blocks * block_kv)
    kv_cache = torch.cat([data.reshape(num_blocks, -1), scale.reshape(num_blocks, -1)], dim=1)
    kv_cache = kv_cache.view(num_blocks, block_kv, 1, width + 4)
    w = torch.randn(rows, h, generator=G)
    meta = deep_gemm.get_paged_mqa_logits_metadata(ctx, block_kv, deep_gemm.get_num_sms(), indices=indices)
    out = deep_gemm.fp8_fp4_paged_mqa_logits(q_in, kv_cache, w, ctx, bt, meta, max_len, clean_logits=True,
                                             indices=indices)
    assert out.shape == (rows, max_len) and out.stride(0) * 4 % 1024 == 0
    for r in range(rows):
        n = int(ctx[r, 0])
        p = torch.arange(n)
        blocks = seq_table[int(indices[r]), p // block_kv].long()
        dots = (q_deq[r, 0].double() @ keys_all[blocks, p % block_kv].double().t()).clamp_min(0)
        ref = (dots * w[r].double()[:, None]).sum(0) * k_scale[blocks, p % block_kv].double()
        assert calc_diff(out[r, :n], ref) < 5e-6
        assert torch.isneginf(out[r, n:]).all()
    with pytest.raises(TypeError, match="'indices'"):
        deep_gemm.fp8_fp4_paged_mqa_logits(q_in, kv_cache, w, ctx, bt, meta, max_len, indices=indices.long())
    with pytest.raises(ValueError, match="'indices'"):
        deep_gemm.get_paged_mqa_logits_metadata(ctx, block_kv, 2, indices=indices[:-1])
