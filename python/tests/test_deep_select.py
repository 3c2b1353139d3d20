"""deep_select.topk: upstream's property checks (tests/test.py), its eager validation
(test_topk_validation_host.py, test_interface_validation.py) and offsets, against torch."""
import itertools
import math

import pytest
import torch

import deep_select

NAN_SENTINEL = 0x3F3F3F3F
FLAGS = [(False, False, False), (False, False, True), (True, False, True), (False, True, True),
         (False, True, False)]  # (sorted, sorted_index, return_value), upstream's valid combos


def check_row(x, L, k, vals, idx, off, sorted_, sorted_index, fill_idx, fill_val):
    c = min(L, k)
    real = idx[:c].to(torch.int64) - off
    assert torch.all((real >= 0) & (real < L))
    assert real.unique().numel() == c
    if sorted_index or (not sorted_ and L > k):
        assert torch.all(real[1:] > real[:-1])  # tilestack: ascending index unless sorted
    if L <= k:
        assert torch.equal(real.sort().values, torch.arange(L))
    assert torch.all(idx[c:] == fill_idx)
    if vals is not None:
        assert torch.equal(vals[:c].view(torch.int16 if x.dtype == torch.bfloat16 else torch.int32),
                           x[real].view(torch.int16 if x.dtype == torch.bfloat16 else torch.int32))
        if c < k:
            assert torch.all(vals[c:].float() == fill_val)
        if sorted_:
            assert torch.all(vals[:c][1:] <= vals[:c][:-1])
    if L > k:
        mask = torch.ones(L, dtype=torch.bool)
        mask[real] = False
        assert x[real].float().min() >= x[:L][mask].float().max()


@pytest.mark.parametrize('dtype,indices_type,flags', [
    c for c in itertools.product([torch.float32, torch.bfloat16], [torch.int32, torch.int64], FLAGS)
    if not (c[2][0] and c[0] == torch.bfloat16)])  # sorted is fp32-only upstream (tested below)
def test_properties(dtype, indices_type, flags):
    sorted_, sorted_index, return_value = flags
    g = torch.Generator().manual_seed(1)
    b, n, k = 7, 3000, 100
    x = torch.randn(b, n, generator=g).to(dtype)
    end = torch.tensor([n, 1, 99, 100, 101, 2500, 0], dtype=torch.int32)
    off = torch.randint(0, 1000, (b,), generator=g, dtype=torch.int32)
    vals, idx = deep_select.topk(x, k, sorted=sorted_, end=end, indices_type=indices_type,
                                 sorted_index=sorted_index, output_idx_offset=off,
                                 return_value=return_value, idx_oob_fill_value=-7,
                                 value_oob_fill_value=-2.5)
    assert idx.dtype == indices_type and idx.shape == (b, k)
    assert (vals is None) == (not return_value)
    for r in range(b):
        check_row(x[r], int(end[r]), k, None if vals is None else vals[r], idx[r], int(off[r]),
                  sorted_, sorted_index, -7, -2.5)


def test_matches_torch_topk_on_distinct_values():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 129280, generator=g)  # sampler shape, distinct values w.h.p.
    vals, idx = deep_select.topk(x, 512, sorted=True)
    ref = torch.topk(x, 512, dim=1, sorted=True)
    assert torch.equal(vals, ref.values) and torch.equal(idx, ref.indices)


def test_padded_output_strides():
    x = torch.randn(3, 500)
    vals, idx = deep_select.topk(x, 13, indices_type=torch.int32)
    for t in (vals, idx):
        assert t.shape == (3, 13) and t.stride(1) == 1
        assert t.stride(0) * t.element_size() % 32 == 0 and t.stride(0) >= 13
    assert not idx.is_contiguous()


def test_nan_rows():
    x = torch.randn(3, 600)
    x[1, 7] = float('nan')
    x[2, 9] = -float('nan')
    idx_out = torch.full((3, 10), 5, dtype=torch.int64)
    with pytest.raises(ValueError, match='NaN|nan|row'):
        deep_select.topk(x, 10, output_idx=idx_out)
    assert torch.all(idx_out == 5)  # nothing written on error
    _, idx = deep_select.topk(x, 10, abort_when_nan_found=False, return_value=False)
    assert idx[1, 0] == NAN_SENTINEL and idx[2, 0] == NAN_SENTINEL
    check_row(x[0], 600, 10, None, idx[0], 0, False, False, 2**31 - 1, None)


def test_index_offsets_in_output_width():
    x = torch.randn(1, 9000)
    off = torch.tensor([2**31 - 1], dtype=torch.int32)
    _, idx = deep_select.topk(x, 8, output_idx_offset=off, return_value=False)
    ref = torch.topk(x, 8, dim=1).indices.sort().values + (2**31 - 1)
    assert torch.equal(idx.sort().values, ref)  # int64: no wrap-around


@pytest.mark.parametrize('k', [0, -1, 4097, 2**31])
def test_bad_k_before_allocation(k, monkeypatch):
    def no_alloc(*a, **kw):
        raise AssertionError('allocated before validating topk')
    monkeypatch.setattr(torch, 'empty_strided', no_alloc)
    with pytest.raises(ValueError, match='topk'):
        deep_select.topk(torch.randn(2, 64), k)


def test_interface_validation():
    x = torch.randn(2, 64)
    with pytest.raises(ValueError, match='begin'):
        deep_select.topk(x, 4, begin=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match='hint'):
        deep_select.topk(x, 4, hint=object())
    with pytest.raises(TypeError, match='output_idx'):
        deep_select.topk(x, 4, output_idx=torch.empty(2, 4, dtype=torch.int32))
    with pytest.raises(TypeError, match='input'):
        deep_select.topk(None, 4)
    with pytest.raises(ValueError, match="input"):
        deep_select.topk(torch.randn(64), 4)
    with pytest.raises(TypeError):
        deep_select.topk(x.double(), 4)
    with pytest.raises(NotImplementedError):
        deep_select.topk(x.bfloat16(), 4, sorted=True)
    with pytest.raises(ValueError):
        deep_select.topk(x, 4, sorted=True, sorted_index=True)
    with pytest.raises(ValueError, match='input'):
        deep_select.topk(torch.randn(64, 2).t(), 4)  # last dim not contiguous, as upstream requires
    out = torch.full((2, 8), 5, dtype=torch.int64)
    with pytest.raises(ValueError, match='output_idx'):
        deep_select.topk(x, 4, output_idx=out[:, ::2], return_value=False)
    assert torch.all(out == 5)
    with pytest.raises(ValueError, match='end'):
        deep_select.topk(x, 4, end=torch.tensor([3, 65], dtype=torch.int32))


def test_k_above_n_and_given_output_returned_itself():
    x = torch.randn(2, 64)
    out = torch.empty(2, 4096, dtype=torch.int64)
    vals, idx = deep_select.topk(x, 4096, output_idx=out)
    assert idx is out
    assert torch.equal(idx[:, :64], torch.arange(64).expand(2, 64))
    assert torch.all(idx[:, 64:] == 2**31 - 1) and torch.all(vals[:, 64:] == -math.inf)


def test_no_copy_of_strided_input_and_output():
    # A [b, N] view with a padded row stride and an output view of a bigger buffer: results
    # land in the caller's memory (the data pointer and the values prove no copy was made).
    buf = torch.randn(4, 1024)
    x = buf[:, :1000]
    big = torch.full((4, 32), -1, dtype=torch.int64)
    out = big[:, 8:24]
    ptr = out.data_ptr()
    _, idx = deep_select.topk(x, 16, output_idx=out, return_value=False)
    assert idx is out and idx.data_ptr() == ptr
    assert torch.equal(out.sort(dim=1).values, torch.topk(x, 16, dim=1).indices.sort(dim=1).values)
    assert torch.all(big[:, :8] == -1) and torch.all(big[:, 24:] == -1)


def test_get_stride_requirement():
    assert deep_select.get_stride_requirement() == (1, 1)
