"""tile_kernels.moe on CPU: the routing kernels over libtilestack's TileKernels ports
(docs/kernels.md "MoE routing"). Upstream's names, arguments and output dtypes."""
import torch

from _tilestack_py import C, missing
from ._common import call, integer, tensor

_IDX = (torch.int64,)


def topk_gate(scores, num_topk: int):
    """Top-k expert indices per row, descending, ties to the smaller index -> int64 [T, K]."""
    fn = 'tile_kernels.moe.topk_gate'
    tensor(scores, fn, 'scores', (torch.float32,), 2)
    integer(num_topk, fn, 'num_topk', 1)
    if num_topk > scores.shape[1]:
        raise C.ValueError(f"{fn}: argument 'num_topk' ({num_topk}) exceeds num_experts ({scores.shape[1]})")
    out = torch.empty((scores.shape[0], num_topk), dtype=torch.int64, device=scores.device)
    if scores.shape[0]:
        call('topk_gate', fn, ('scores', 'topk_idx'), scores, out)
    return out


def aux_fi(topk_idx, num_experts: int, num_aux_topk: int):
    """f_i[e] = count[e] * E / (T * num_aux_topk), -1 entries ignored -> f32 [E]."""
    fn = 'tile_kernels.moe.aux_fi'
    tensor(topk_idx, fn, 'topk_idx', _IDX, 2)
    integer(num_experts, fn, 'num_experts', 1)
    integer(num_aux_topk, fn, 'num_aux_topk', 1)
    out = torch.zeros(num_experts, dtype=torch.float32, device=topk_idx.device)
    if topk_idx.shape[0]:
        call('aux_fi', fn, ('topk_idx', 'fi'), topk_idx, out, num_aux_topk)
    return out


def group_count(group_idx, num_groups: int):
    """Histogram of the entries >= 0 -> int32 [num_groups]."""
    fn = 'tile_kernels.moe.group_count'
    tensor(group_idx, fn, 'group_idx', _IDX, 2)
    integer(num_groups, fn, 'num_groups', 1)
    out = torch.zeros(num_groups, dtype=torch.int32, device=group_idx.device)
    if group_idx.shape[0]:
        call('group_count', fn, ('group_idx', 'count'), group_idx, out)
    return out


def mask_indices_by_tp(indices, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int):
    """Indices of this TP rank's experts renumbered locally, others -1 (same shape and dtype)."""
    fn = 'tile_kernels.moe.mask_indices_by_tp'
    tensor(indices, fn, 'indices', _IDX, 2)
    for v, a in ((n, 'n'), (num_ep_ranks, 'num_ep_ranks'), (num_tp_ranks, 'num_tp_ranks')):
        integer(v, fn, a, 1)
    integer(tp_rank, fn, 'tp_rank', 0)
    out = torch.empty_like(indices, memory_format=torch.contiguous_format)
    if indices.shape[0]:
        call('mask_indices_by_tp', fn, ('indices', 'out'), indices, out, n, num_ep_ranks, tp_rank, num_tp_ranks)
    return out


def normalize_weight(topk_weights):
    """(denominator [T] = 1e-20 + sum_k w, normalized [T, K] = w / denominator)."""
    fn = 'tile_kernels.moe.normalize_weight'
    tensor(topk_weights, fn, 'topk_weights', (torch.float32,), 2)
    den = torch.empty(topk_weights.shape[0], dtype=torch.float32, device=topk_weights.device)
    out = torch.empty(topk_weights.shape, dtype=torch.float32, device=topk_weights.device)
    if topk_weights.shape[0]:
        call('normalize_weight', fn, ('topk_weights', 'denominator', 'normalized_weights'), topk_weights, den, out)
    return den, out


def inplace_unique_group_indices(group_indices, num_groups: int):
    """In place: a group id already seen earlier in its row becomes -1. Returns None."""
    fn = 'tile_kernels.moe.inplace_unique_group_indices'
    tensor(group_indices, fn, 'group_indices', _IDX, 2)
    integer(num_groups, fn, 'num_groups', 1)
    if group_indices.shape[0]:
        call('inplace_unique_group_indices', fn, ('group_indices',), group_indices, num_groups)


def topk_sum_and_topk_group_idx(scores, num_topk_sum: int, num_topk_groups: int):
    """Per token, the num_topk_groups groups with the largest sum of their num_topk_sum (1 or 2)
    best scores, best first, ties to the smaller group -> int64 [T, num_topk_groups]."""
    fn = 'tile_kernels.moe.topk_sum_and_topk_group_idx'
    tensor(scores, fn, 'scores', (torch.float32,), 3)
    integer(num_topk_sum, fn, 'num_topk_sum', 1)
    integer(num_topk_groups, fn, 'num_topk_groups', 1)
    if num_topk_sum not in (1, 2) or num_topk_sum > scores.shape[2]:
        raise C.ValueError(f"{fn}: argument 'num_topk_sum' must be 1 or 2 and at most the experts per group, "
                           f'got {num_topk_sum}')
    if num_topk_groups > scores.shape[1]:
        raise C.ValueError(f"{fn}: argument 'num_topk_groups' ({num_topk_groups}) exceeds num_groups "
                           f'({scores.shape[1]})')
    out = torch.empty((scores.shape[0], num_topk_groups), dtype=torch.int64, device=scores.device)
    if scores.shape[0]:
        call('topk_sum_and_topk_group_idx', fn, ('scores', 'group_idx'), scores, out, num_topk_sum)
    return out


_C_EXISTS = 'the C kernel exists in libtilestack (docs/kernels.md); its Python binding is not written yet'
top2_sum_gate = missing('tile_kernels.moe.top2_sum_gate', _C_EXISTS + ' (ts_top2_sum_gate)')
get_fused_mapping = missing('tile_kernels.moe.get_fused_mapping', _C_EXISTS + ' (ts_get_fused_mapping)')
expand_to_fused = missing('tile_kernels.moe.expand_to_fused', _C_EXISTS + ' (ts_expand_to_fused)')
expand_to_fused_with_sf = missing('tile_kernels.moe.expand_to_fused_with_sf',
                                  _C_EXISTS + ' (ts_expand_to_fused_with_sf)')
reduce_fused = missing('tile_kernels.moe.reduce_fused', _C_EXISTS + ' (ts_reduce_fused)')


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.moe.{name}', 'not in tilestack')
