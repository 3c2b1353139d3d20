"""The bindings hold no reference past a call and leak none on the error paths (the view layer
borrows its arguments; every object it creates is released)."""
import sys

import numpy as np
import pytest
import torch

import _tilestack as C
import deep_gemm
import deep_select
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8


def counts(*objs):
    return [sys.getrefcount(o) for o in objs]


def test_no_reference_kept_on_success_or_error():
    x = torch.randn(4, 300)
    idx = torch.empty(4, 8, dtype=torch.int64)
    a_q = per_token_cast_to_fp8(torch.randn(8, 128).bfloat16(), False)
    b_q = per_block_cast_to_fp8(torch.randn(128, 128).bfloat16(), False)
    d = torch.empty(8, 128, dtype=torch.bfloat16)
    bad_d = torch.empty(8, 129, dtype=torch.bfloat16)
    objs = (x, idx, a_q[0], a_q[1], b_q[0], b_q[1], d, bad_d)
    before = counts(*objs)
    for _ in range(200):
        deep_select.topk(x, 8, output_idx=idx, return_value=False)
        deep_gemm.fp8_gemm_nt(a_q, b_q, d)
        with pytest.raises(ValueError):
            deep_gemm.fp8_gemm_nt(a_q, b_q, bad_d)
        with pytest.raises(TypeError):
            C.k_grouped_bf16(x, x, d, ['1'], None, None, None, False)  # bad ks_cpu: freed path
        with pytest.raises(TypeError):
            deep_gemm.fp8_gemm_nt(a_q, b_q, None)
    assert counts(*objs) == before


def test_numpy_inputs_where_a_tensor_is_read():
    # calc_diff reads any array: a numpy array is viewed in place like a tensor
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    y = x + np.float32(0.01)
    t = deep_gemm.testing.calc_diff(torch.from_numpy(x), torch.from_numpy(y))
    assert deep_gemm.testing.calc_diff(x, y) == t
    with pytest.raises(TypeError, match="array type"):
        deep_gemm.testing.calc_diff(x.astype(np.complex64), y)


def test_no_python_memory_growth():
    import tracemalloc
    x = torch.randn(2, 64)
    idx = torch.empty(2, 4, dtype=torch.int64)
    for _ in range(100):  # warm caches (interned names, dtype tables)
        deep_select.topk(x, 4, output_idx=idx, return_value=False)
        C.view_info(x.t())
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            deep_select.topk(x, 4, output_idx=idx, return_value=False)
            C.view_info(x.t())
            try:
                C.view_info(None)
            except TypeError:
                pass
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # a leak of one object per call would be >= 5000 objects
