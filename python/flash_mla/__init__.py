"""flash_mla (deepseek-ai/FlashMLA) on CPU over libtilestack (include/tilestack/flash_mla.h):
get_mla_metadata, flash_mla_with_kvcache (dense bf16 and sparse FP8 decode) and
flash_mla_sparse_fwd, with HEAD's signatures and natural-log lse (docs/python.md)."""
import torch

from _tilestack_py import C

_empty, _BF16, _F32 = torch.empty, torch.bfloat16, torch.float32

__all__ = ['FlashMLASchedMeta', 'get_mla_metadata', 'flash_mla_with_kvcache', 'flash_mla_sparse_fwd']


class FlashMLASchedMeta:
    """The scheduling handle: empty until the first flash_mla_with_kvcache call fills it with that
    call's config and the values of cache_seqlens / topk_length; a later call with others raises
    ValueError. One per decode step, shared by the layers, one call at a time (as upstream)."""
    __slots__ = ('_handle',)

    def __init__(self):
        self._handle = C.mla_metadata_new()


def get_mla_metadata(*args, **kwargs):
    """HEAD's form: the arguments are ignored; returns (FlashMLASchedMeta(), None)."""
    del args, kwargs
    return FlashMLASchedMeta(), None


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False,
                           indices=None, attn_sink=None, extra_k_cache=None,
                           extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None):
    """MLA decode. Dense: q bf16 [b, s_q, h_q, d_qk], k_cache bf16 [blocks, P, h_kv, d_qk].
    Sparse (indices given): FP8 k_cache (V32 656 B / MODEL1 584 B per token), indices
    [b, s_q, topk]. Returns (out bf16 [b, s_q, h_q, head_dim_v], lse f32 [b, h_q, s_q])."""
    fn = 'flash_mla.flash_mla_with_kvcache'
    del num_splits  # HEAD keeps it for compatibility; the handle carries the plan
    if not isinstance(tile_scheduler_metadata, FlashMLASchedMeta):
        raise C.TypeError(f"{fn}: argument 'tile_scheduler_metadata' must be the FlashMLASchedMeta from "
                          f'get_mla_metadata(), got {type(tile_scheduler_metadata).__name__}')
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise C.ValueError(f"{fn}: argument 'q' must be a 4-D tensor [b, s_q, h_q, d_qk]")
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, int) or head_dim_v <= 0:
        raise C.ValueError(f'{fn}: head_dim_v must be a positive int, got {head_dim_v!r}')
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((b, s_q, h_q, head_dim_v), dtype=torch.bfloat16)
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32)
    C.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                             tile_scheduler_metadata._handle, softmax_scale, causal, is_fp8_kvcache,
                             indices, attn_sink, extra_k_cache, extra_indices_in_kvcache, topk_length,
                             extra_topk_length, out, lse)
    return out, lse


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
    """Sparse prefill: q bf16 [s_q, h_q, d_qk], kv bf16 [s_kv, 1, d_qk], indices int32
    [s_q, 1, topk] (token indices into kv; < 0 or >= s_kv is invalid). Returns (out bf16
    [s_q, h_q, d_v], max_logits f32 [s_q, h_q], lse f32 [s_q, h_q]) in natural-log units."""
    fn = 'flash_mla.flash_mla_sparse_fwd'
    if not isinstance(q, torch.Tensor):
        raise C.TypeError(f"{fn}: argument 'q' must be a torch tensor, got {type(q).__name__}")
    shape = q.shape
    if len(shape) != 3:
        raise C.ValueError(f"{fn}: argument 'q' must be [s_q, h_q, d_qk], got shape {tuple(shape)}")
    if isinstance(d_v, bool) or not isinstance(d_v, int) or d_v <= 0:
        raise C.ValueError(f'{fn}: d_v must be a positive int, got {d_v!r}')
    # the outputs are this call's whole Python cost: sizes as positional ints and the dtypes
    # bound once (1.6 us less per call than tuples and torch.<dtype> lookups, measured on Zen 5)
    s_q, h_q, _ = shape
    out = _empty(s_q, h_q, d_v, dtype=_BF16)
    max_logits = _empty(s_q, h_q, dtype=_F32)
    lse = _empty(s_q, h_q, dtype=_F32)
    C.flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out, max_logits, lse)
    return out, max_logits, lse
