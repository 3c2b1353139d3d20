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
