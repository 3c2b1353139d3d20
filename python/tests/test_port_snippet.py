"""DeepSeek-style code runs unchanged except for the device (docs/python.md's porting example):
quantise with deep_gemm.utils, FP8 GEMM, then deep_select.topk on the scores."""
import torch

import deep_gemm
import deep_select
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8


def test_upstream_style_snippet_on_cpu():
    torch.manual_seed(0)
    device = 'cpu'  # the only change from the CUDA original
    x = torch.randn(4, 7168, dtype=torch.bfloat16, device=device)
    w = torch.randn(2048, 7168, dtype=torch.bfloat16, device=device)
    d = torch.empty(4, 2048, dtype=torch.bfloat16, device=device)
    deep_gemm.fp8_gemm_nt(per_token_cast_to_fp8(x, use_ue8m0=False),
                          per_block_cast_to_fp8(w, use_ue8m0=False), d)
    ref = x.double() @ w.double().t()
    assert calc_diff(d, ref) < 1e-3
    scores, idx = deep_select.topk(d.float(), 64, sorted=True)
    ref_top = torch.topk(d.float(), 64, dim=1, sorted=True)
    assert torch.equal(scores, ref_top.values)
    # ties among bf16 scores may pick other indices of equal value; the values decide
    assert torch.equal(d.float().gather(1, idx), scores)
