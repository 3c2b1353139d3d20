"""flash_mla.flash_mla_sparse_fwd against a float64 torch reference of upstream's formula
(natural-log lse / max_logits, sink scaling, empty rows), with every KV row no valid index
points at filled with NaN, as upstream's tests do."""
import math

import pytest
import torch

import flash_mla
from deep_gemm.testing import calc_diff

G = torch.Generator().manual_seed(3)


def make(s_q=5, h_q=8, d_qk=576, s_kv=200, topk=64):
    q = (torch.randn(s_q, h_q, d_qk, generator=G) / 8).bfloat16()
    kv = torch.randn(s_kv, 1, d_qk, generator=G).bfloat16()
    idx = torch.stack([torch.randperm(s_kv, generator=G)[:topk] for _ in range(s_q)]).int()
    idx[:, -5:] = -1
    idx[1, :3] = torch.tensor([s_kv, 2**31 - 1, -7], dtype=torch.int32)
    idx[4, :] = -1  # a query with no valid token
    used = torch.zeros(s_kv, dtype=torch.bool)
    valid = (idx >= 0) & (idx < s_kv)
    used[idx[valid].long()] = True
    kv[~used] = float('nan')
    return q, kv, idx.view(s_q, 1, topk)


def reference(q, kv, idx, scale, d_v, sink=None):
    s_q, h_q, _ = q.shape
    out = torch.zeros(s_q, h_q, d_v, dtype=torch.float64)
    ml = torch.full((s_q, h_q), -math.inf, dtype=torch.float64)
    lse = torch.full((s_q, h_q), math.inf, dtype=torch.float64)
    for i in range(s_q):
        sel = idx[i, 0][(idx[i, 0] >= 0) & (idx[i, 0] < kv.shape[0])].long()
        if sel.numel() == 0:
            continue
        k = kv[sel, 0].double()
        p = scale * q[i].double() @ k.t()  # [h_q, n]
        ml[i] = p.max(1).values
        lse[i] = torch.logsumexp(p, 1)
        out[i] = torch.exp(p - lse[i][:, None]) @ k[:, :d_v]
        if sink is not None:
            out[i] *= (1 / (1 + torch.exp(sink.double() - lse[i])))[:, None]
    return out, ml, lse


@pytest.mark.parametrize('with_sink', [False, True])
def test_sparse_fwd_against_reference(with_sink):
    q, kv, idx = make()
    scale = 576 ** -0.5
    sink = torch.randn(q.shape[1], generator=G) if with_sink else None
    out, ml, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, scale, 512, attn_sink=sink)
    r_out, r_ml, r_lse = reference(q, kv, idx, scale, 512, sink)
    assert out.shape == (5, 8, 512) and out.dtype == torch.bfloat16
    # upstream's outputs: three separate contiguous tensors
    assert out.stride() == (8 * 512, 512, 1) and ml.dtype == lse.dtype == torch.float32
    assert ml.shape == lse.shape == (5, 8) and ml.stride() == lse.stride() == (8, 1)
    assert out.data_ptr() != ml.data_ptr() != lse.data_ptr()
    assert not torch.isnan(out).any()  # NaN rows never read
    assert torch.all(out[4] == 0) and torch.all(torch.isposinf(lse[4])) and torch.all(torch.isneginf(ml[4]))
    assert calc_diff(out[:4], r_out[:4]) < 1e-5
    assert torch.allclose(lse[:4].double(), r_lse[:4], rtol=0, atol=1e-5)
    assert torch.allclose(ml[:4].double(), r_ml[:4], rtol=0, atol=1e-5)


def test_sparse_fwd_topk_length_and_errors():
    q, kv, idx = make()
    lengths = torch.tensor([64, 10, 0, 30, 64], dtype=torch.int32)
    out, _, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.05, topk_length=lengths)
    cut = idx.clone()
    for i, n in enumerate(lengths.tolist()):
        cut[i, 0, n:] = -1
    r_out, _, r_lse = reference(q, kv, cut, 0.05, 512)
    assert torch.all(out[2] == 0) and torch.all(torch.isposinf(lse[2]))
    assert calc_diff(out[[0, 1, 3]], r_out[[0, 1, 3]]) < 1e-5
    with pytest.raises(TypeError):
        flash_mla.flash_mla_sparse_fwd(q.float(), kv, idx, 0.05)
    with pytest.raises(ValueError, match='q'):
        flash_mla.flash_mla_sparse_fwd(q[0], kv, idx, 0.05)
    with pytest.raises(TypeError, match="'indices' is None"):
        flash_mla.flash_mla_sparse_fwd(q, kv, None, 0.05)
    with pytest.raises(ValueError):
        flash_mla.flash_mla_sparse_fwd(q, kv, idx, -1.0)


def decode_reference(q, keys_per_req, scale, d_v, sink=None):
    """q [b, s_q, h_q, d_qk]; keys_per_req[i][s] = K rows [n, d_qk] attended by query token s."""
    b, s_q, h_q, _ = q.shape
    out = torch.zeros(b, s_q, h_q, d_v, dtype=torch.float64)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float64)
    for i in range(b):
        for s in range(s_q):
            k = keys_per_req[i][s]
            if k.shape[0] == 0:
                continue
            p = scale * q[i, s].double() @ k.t()
            lse[i, :, s] = torch.logsumexp(p, 1)
            out[i, s] = torch.exp(p - lse[i, :, s][:, None]) @ k[:, :d_v]
            if sink is not None:
                out[i, s] *= (1 / (1 + torch.exp(sink.double() - lse[i, :, s])))[:, None]
    return out, lse


@pytest.mark.parametrize('causal', [False, True])
def test_dense_decode(causal):
    b, s_q, h_q, d, P = 3, 2, 16, 576, 64
    seqlens = torch.tensor([130, 0, 64], dtype=torch.int32)
    max_blocks = 3
    num_blocks = b * max_blocks
    k_cache = torch.randn(num_blocks, P, 1, d, generator=G).bfloat16()
    block_table = torch.randperm(num_blocks, generator=G).view(b, max_blocks).int()
    q = (torch.randn(b, s_q, h_q, d, generator=G) / 8).bfloat16()
    meta, _ = flash_mla.get_mla_metadata(seqlens, s_q * h_q, 1)
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, meta,
                                                causal=causal)
    keys = []
    for i in range(b):
        n = int(seqlens[i])
        p = torch.arange(n)
        k = k_cache[block_table[i, p // P].long(), p % P, 0].double()
        keys.append([k[:n - s_q + s + 1] if causal else k for s in range(s_q)])
    r_out, r_lse = decode_reference(q, keys, d ** -0.5, 512)
    assert out.shape == (b, s_q, h_q, 512) and lse.shape == (b, h_q, s_q)
    assert torch.all(out[1] == 0) and torch.all(torch.isposinf(lse[1]))
    live = [0, 2]
    assert calc_diff(out[live], r_out[live]) < 1e-5
    assert torch.allclose(lse[live].double(), r_lse[live], rtol=0, atol=1e-5)
    # the handle is bound to this call's config and seqlens now, as upstream
    with pytest.raises(ValueError):
        flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens + 1, 512, meta, causal=causal)
    with pytest.raises(TypeError, match='tile_scheduler_metadata'):
        flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, seqlens, 512, None)


def v32_cache(kv):
    """bf16 [blocks, P, 1, 576] -> the V32 FP8 cache (656 bytes per token: 512 e4m3 with one
    power-of-two f32 scale per 128 dims, then 4 scales, then 64 bf16 RoPE dims) and the
    dequantised bf16 K it stands for."""
    nope = kv[..., :512].float().view(*kv.shape[:3], 4, 128)
    amax = nope.abs().amax(-1, keepdim=True)
    scale = torch.exp2(torch.ceil(torch.log2((amax / 448).clamp_min(1e-4))))
    q8 = (nope / scale).to(torch.float8_e4m3fn)
    deq = (q8.float() * scale).bfloat16().view(*kv.shape[:3], 512)
    raw = torch.cat([q8.view(torch.uint8).flatten(3), scale.squeeze(-1).contiguous().view(torch.uint8).flatten(3),
                     kv[..., 512:].contiguous().view(torch.uint8)], dim=-1)
    return raw.contiguous(), torch.cat([deq, kv[..., 512:]], dim=-1)


def test_sparse_fp8_decode():
    b, s_q, h_q, P, num_blocks, topk = 2, 1, 16, 64, 6, 128
    kv = torch.randn(num_blocks, P, 1, 576, generator=G).bfloat16()
    cache, k_deq = v32_cache(kv)
    assert cache.shape[-1] == 656
    idx = torch.stack([torch.randperm(num_blocks * P, generator=G)[:topk] for _ in range(b * s_q)])
    idx = idx.view(b, s_q, topk).int()
    idx[:, :, -8:] = -1
    q = (torch.randn(b, s_q, h_q, 576, generator=G) / 8).bfloat16()
    sink = torch.randn(h_q, generator=G)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                                indices=idx, attn_sink=sink)
    flat = k_deq.view(-1, 576)
    keys = [[flat[idx[i, s][idx[i, s] >= 0].long()].double() for s in range(s_q)] for i in range(b)]
    r_out, r_lse = decode_reference(q, keys, 576 ** -0.5, 512, sink)
    assert calc_diff(out, r_out) < 1e-5
    assert torch.allclose(lse.double(), r_lse, rtol=0, atol=1e-5)
