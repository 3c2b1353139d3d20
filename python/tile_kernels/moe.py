"""tile_kernels.moe on CPU: the routing kernels over libtilestack's TileKernels ports
(docs/kernels.md "MoE routing"). Upstream's names, arguments and output dtypes."""
import torch

from _tilestack_py import C, missing, pair
from ._common import alloc_sf, call, ceil_div, integer, tensor

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


_SCORING = {'sigmoid': 0, 'sqrtsoftplus': 1, 'softmax': 2}


def top2_sum_gate(logits, bias, num_topk: int, num_topk_groups: int, num_groups: int, use_shared_as_routed: bool,
                  num_shared_experts: int, routed_scaling_factor: float, ep_rank: int, num_ep_ranks: int,
                  tp_rank: int, num_tp_ranks: int, scoring_func: str, mask=None, fix_routing_mask=None,
                  to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    """The MoE router (scoring, biased ranking, optional group limit by top-2 sums, top-k,
    normalised weights x routed_scaling_factor, shared experts as extra slots, masks, logical ->
    physical map, EP / TP masking) -> (topk_idx int64 [T, K + S], topk_weights f32 [T, K + S])."""
    fn = 'tile_kernels.moe.top2_sum_gate'
    tensor(logits, fn, 'logits', (torch.float32,), 2)
    tensor(bias, fn, 'bias', (torch.float32,), 1)
    for v, a in ((num_topk, 'num_topk'), (num_ep_ranks, 'num_ep_ranks'), (num_tp_ranks, 'num_tp_ranks')):
        integer(v, fn, a, 1)
    for v, a in ((num_topk_groups, 'num_topk_groups'), (num_groups, 'num_groups'), (ep_rank, 'ep_rank'),
                 (tp_rank, 'tp_rank'), (num_shared_experts, 'num_shared_experts')):
        integer(v, fn, a, 0)
    if scoring_func not in _SCORING:
        raise C.ValueError(f"{fn}: argument 'scoring_func' must be one of {tuple(_SCORING)}, got {scoring_func!r}")
    t, e = logits.shape
    if bias.shape[0] != e:
        raise C.ValueError(f"{fn}: argument 'bias' has {bias.shape[0]} entries, logits {e} experts")
    if (num_groups == 0) != (num_topk_groups == 0):
        raise C.ValueError(f'{fn}: num_groups and num_topk_groups must be both zero or both non-zero')
    if (to_physical_map is None) != (logical_count is None):
        raise C.ValueError(f"{fn}: arguments 'to_physical_map' and 'logical_count' go together")
    if fix_routing_mask is not None and unmapped_topk_idx is None:
        raise C.ValueError(f"{fn}: argument 'fix_routing_mask' needs unmapped_topk_idx")
    shared = num_shared_experts if use_shared_as_routed else 0
    dev = logits.device
    kp = num_topk + shared
    topk_idx = torch.empty((t, kp), dtype=torch.int64, device=dev)
    topk_weights = torch.empty((t, kp), dtype=torch.float32, device=dev)
    if t == 0:
        return topk_idx, topk_weights
    extra = 0
    if to_physical_map is not None:
        tensor(to_physical_map, fn, 'to_physical_map', (torch.int32,), 2)
        tensor(logical_count, fn, 'logical_count', (torch.int32,), 1)
        extra = to_physical_map.shape[1] - 1
    if shared > extra:
        raise C.ValueError(f'{fn}: num_shared_experts ({shared}) exceeds the extra physical experts ({extra}) '
                           'of to_physical_map (upstream asserts the same)')
    b1 = torch.zeros(1, dtype=torch.bool, device=dev)
    if mask is not None:
        tensor(mask, fn, 'mask', (torch.bool,))
        mask = mask.reshape(-1)
    if fix_routing_mask is not None:
        tensor(fix_routing_mask, fn, 'fix_routing_mask', (torch.bool,), 1)
    if unmapped_topk_idx is not None:
        tensor(unmapped_topk_idx, fn, 'unmapped_topk_idx', (torch.int64,), 2)
    g, kg = (num_groups, num_topk_groups) if num_groups else (1, 1)
    names = ('logits', 'bias', 'mask', 'topk_idx', 'topk_weights', 'unmapped_topk_idx', 'fix_routing_mask',
             'to_physical_map', 'logical_count')
    call('top2_sum_gate', fn, names, logits, bias, b1 if mask is None else mask, topk_idx, topk_weights,
         num_topk, g, kg, _SCORING[scoring_func], float(routed_scaling_factor), mask is not None, extra, ep_rank,
         num_ep_ranks, tp_rank, num_tp_ranks,
         torch.zeros((1, 1), dtype=torch.int64, device=dev) if unmapped_topk_idx is None else unmapped_topk_idx,
         unmapped_topk_idx is not None, b1 if fix_routing_mask is None else fix_routing_mask,
         fix_routing_mask is not None,
         torch.zeros((1, 1), dtype=torch.int32, device=dev) if to_physical_map is None else to_physical_map,
         torch.ones(1, dtype=torch.int32, device=dev) if logical_count is None else logical_count,
         to_physical_map is not None)
    return topk_idx, topk_weights


def get_fused_mapping(topk_idx, num_experts: int, num_expanded_tokens: int, alignment: int, force_no_sync: bool = False):
    """Expert-major fused layout of the routed (token, k) pairs, each expert's segment padded to
    alignment -> (pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, expert_start,
    expert_end, num_tokens_per_expert, num_tokens_per_expert_list). num_expanded_tokens = 0 (and
    not force_no_sync): upstream's estimate, then trimmed to the aligned total, with the list."""
    fn = 'tile_kernels.moe.get_fused_mapping'
    tensor(topk_idx, fn, 'topk_idx', _IDX, 2)
    integer(num_experts, fn, 'num_experts', 1)
    integer(num_expanded_tokens, fn, 'num_expanded_tokens', 0)
    integer(alignment, fn, 'alignment', 1)
    t, k = topk_idx.shape
    sync = num_expanded_tokens == 0 and not force_no_sync
    if sync:
        num_expanded_tokens = (t * k + (alignment - 1) * num_experts) // alignment * alignment
    dev = topk_idx.device
    i32 = dict(dtype=torch.int32, device=dev)
    outs = [torch.empty(num_expanded_tokens, **i32) for _ in range(3)]
    outs.append(torch.empty((t, k), **i32))
    outs += [torch.empty(num_experts, **i32) for _ in range(3)]
    names = ('topk_idx', 'pos_to_expert', 'pos_to_token', 'pos_to_token_topk', 'token_topk_to_pos',
             'expert_start', 'expert_end', 'num_tokens_per_expert')
    if num_expanded_tokens > 0 or t * k > 0:
        call('get_fused_mapping', fn, names, topk_idx, *outs, alignment)
    counts = []
    if sync:
        counts = outs[6].tolist()
        total = sum(counts)
        outs[0], outs[1], outs[2] = outs[0][:total], outs[1][:total], outs[2][:total]
    return (*outs, counts)


def _inverse(token_topk_to_pos, rows, fn):
    """pos_to_token from token_topk_to_pos (-1 where no (token, k) lands)."""
    tensor(token_topk_to_pos, fn, 'token_topk_to_pos', (torch.int32,), 2)
    ttp = token_topk_to_pos.to(torch.int64)
    valid = ttp >= 0
    if bool((ttp >= rows).any()):
        raise C.ValueError(f"{fn}: argument 'token_topk_to_pos' has positions >= {rows} (pos_to_expert's length)")
    p2t = torch.full((rows,), -1, dtype=torch.int32, device=ttp.device)
    tok = torch.arange(ttp.shape[0], dtype=torch.int32, device=ttp.device)[:, None].expand_as(ttp)
    p2t[ttp[valid]] = tok[valid]
    return p2t


def expand_to_fused(x, token_topk_to_pos, pos_to_expert):
    """out[token_topk_to_pos[t, k]] = x[t]; positions nothing lands on are zero rows."""
    fn = 'tile_kernels.moe.expand_to_fused'
    tensor(x, fn, 'x', (torch.bfloat16,), 2)
    tensor(pos_to_expert, fn, 'pos_to_expert', (torch.int32,), 1)
    p2t = _inverse(token_topk_to_pos, pos_to_expert.shape[0], fn)
    if token_topk_to_pos.shape[0] != x.shape[0]:
        raise C.ValueError(f"{fn}: argument 'token_topk_to_pos' has {token_topk_to_pos.shape[0]} rows, x {x.shape[0]}")
    out = torch.empty((pos_to_expert.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)
    if out.numel():
        call('expand_to_fused', fn, ('x', 'pos_to_token', 'out'), x, p2t, out)
    return out


def reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format: str = '', sf=None, out=None):
    """out[t] = OT(g * sum over k of x[token_topk_to_pos[t, k]] * s), s = topk_weights[t, k] (1
    without weights) times x_sf[pos] for a (x, x_sf f32 [P]) pair, an f32 fma chain in k order
    (positions < 0 skipped); g = sf[0] (f32 [1], FP8 output only, as upstream), else 1. OT is
    x's dtype (bf16 / f32), or e4m3 (saturating) with fp8_format='e4m3'."""
    fn = 'tile_kernels.moe.reduce_fused'
    x_sf = None
    if isinstance(x, (tuple, list)):
        x, x_sf = pair(x, fn, 'x')
    tensor(x, fn, 'x', (torch.bfloat16, torch.float32), 2)
    if fp8_format not in ('', 'e4m3'):
        raise C.ValueError(f"{fn}: argument 'fp8_format' must be '' or 'e4m3', got {fp8_format!r}")
    tensor(token_topk_to_pos, fn, 'token_topk_to_pos', (torch.int32,), 2)
    t, k = token_topk_to_pos.shape
    rows, hidden = x.shape
    if x_sf is not None:
        tensor(x_sf, fn, 'x_sf', (torch.float32,), 1)
        if x_sf.shape[0] != rows:
            raise C.ValueError(f"{fn}: argument 'x_sf' must have x.shape[0] = {rows} entries, got {x_sf.shape[0]}")
    if sf is not None:
        if fp8_format == '':
            raise C.ValueError(f"{fn}: argument 'sf' needs fp8_format='e4m3' (upstream: only FP8 output supports sf)")
        tensor(sf, fn, 'sf', (torch.float32,))
        if sf.numel() != 1:
            raise C.ValueError(f"{fn}: argument 'sf' must hold one value, got shape {tuple(sf.shape)}")
    if topk_weights is not None:
        tensor(topk_weights, fn, 'topk_weights', (torch.float32,), 2)
    out_dtype = torch.float8_e4m3fn if fp8_format else x.dtype
    if out is not None:
        tensor(out, fn, 'out', (out_dtype,), 2)
        if tuple(out.shape) != (t, hidden):
            raise C.ValueError(f"{fn}: argument 'out' must be [{t}, {hidden}], got {tuple(out.shape)}")
    if topk_weights is None:
        topk_weights = torch.ones((t, k), dtype=torch.float32, device=x.device)
    if out is None:
        out = torch.empty((t, hidden), dtype=out_dtype, device=x.device)
    if t:
        unused = torch.zeros(1, dtype=torch.float32, device=x.device)
        kernel = 'reduce_fused' + ('_f32' if x.dtype == torch.float32 else '') + '_scaled' + ('_e4m3' if fp8_format else '')
        call(kernel, fn, ('x', 'topk_weights', 'token_topk_to_pos', 'x_sf', 'sf', 'out'), x, topk_weights,
             token_topk_to_pos, unused if x_sf is None else x_sf, unused if sf is None else sf.reshape(1), out,
             x_sf is not None, sf is not None)
    return out


def expand_to_fused_with_sf(x, num_per_channels: int, token_topk_to_pos, pos_to_expert,
                            use_tma_aligned_col_major_sf: bool = False):
    """expand_to_fused of an FP8 (data, sf) pair: data rows and their scale rows (f32 [T, ceil(H /
    num_per_channels)], or packed UE8M0 int32 [T, ceil(ceil(H / num_per_channels) / 4)]) land on
    every position token_topk_to_pos names; other positions get zero codes and zero scales ->
    (out e4m3 [P, H], out_sf [P, ...] in x_sf's dtype, column-major with
    use_tma_aligned_col_major_sf)."""
    fn = 'tile_kernels.moe.expand_to_fused_with_sf'
    data, x_sf = pair(x, fn, 'x')
    tensor(data, fn, 'x', (torch.float8_e4m3fn,), 2)
    tensor(x_sf, fn, 'x_sf', (torch.float32, torch.int32), 2)
    integer(num_per_channels, fn, 'num_per_channels', 1)
    if num_per_channels not in (32, 128):
        raise C.ValueError(f"{fn}: argument 'num_per_channels' must be 32 or 128 (as upstream), got {num_per_channels}")
    tensor(pos_to_expert, fn, 'pos_to_expert', (torch.int32,), 1)
    tensor(token_topk_to_pos, fn, 'token_topk_to_pos', (torch.int32,), 2)
    packed = x_sf.dtype == torch.int32
    if packed and not use_tma_aligned_col_major_sf:
        raise C.ValueError(f'{fn}: packed UE8M0 scales (int32 x_sf) need use_tma_aligned_col_major_sf=True '
                           '(upstream asserts the same)')
    tokens, hidden = data.shape
    blocks = ceil_div(hidden, num_per_channels)
    cols = ceil_div(blocks, 4) if packed else blocks
    if tuple(x_sf.shape) != (tokens, cols):
        raise C.ValueError(f"{fn}: argument 'x_sf' must be [{tokens}, {cols}] for {tokens} tokens of {hidden} channels "
                           f'and num_per_channels={num_per_channels}, got {tuple(x_sf.shape)}')
    if token_topk_to_pos.shape[0] != tokens:
        raise C.ValueError(f"{fn}: argument 'token_topk_to_pos' has {token_topk_to_pos.shape[0]} rows, x {tokens}")
    rows = pos_to_expert.shape[0]
    p2t = _inverse(token_topk_to_pos, rows, fn)
    out = torch.empty((rows, hidden), dtype=data.dtype, device=data.device)
    out_sf = alloc_sf(rows, blocks, use_tma_aligned_col_major_sf, packed, data.device)
    if rows:
        call('expand_to_fused_with_sf' + ('_ue8m0' if packed else ''), fn, ('x', 'x_sf', 'pos_to_token', 'out', 'out_sf'),
             data, x_sf, p2t, out, out_sf)
    return out, out_sf


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.moe.{name}', 'not in tilestack')
