"""flash_mla (deepseek-ai/FlashMLA) on CPU over libtilestack (include/tilestack/flash_mla.h).
flash_mla_sparse_fwd is bound; the decode entry points (get_mla_metadata,
flash_mla_with_kvcache) come in a later change and raise NotImplementedError naming the C
function behind them (docs/python.md)."""
import torch

from _tilestack_py import C, missing

__all__ = ['flash_mla_sparse_fwd', 'get_mla_metadata', 'flash_mla_with_kvcache']

_LATER = 'the C function {} exists; its Python binding is not written yet'
get_mla_metadata = missing('flash_mla.get_mla_metadata', _LATER.format('ts_get_mla_metadata'))
flash_mla_with_kvcache = missing('flash_mla.flash_mla_with_kvcache', _LATER.format('ts_flash_mla_with_kvcache'))


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
    """Sparse prefill: q bf16 [s_q, h_q, d_qk], kv bf16 [s_kv, 1, d_qk], indices int32
    [s_q, 1, topk] (token indices into kv; < 0 or >= s_kv is invalid). Returns (out bf16
    [s_q, h_q, d_v], max_logits f32 [s_q, h_q], lse f32 [s_q, h_q]) in natural-log units."""
    fn = 'flash_mla.flash_mla_sparse_fwd'
    if not isinstance(q, torch.Tensor):
        raise C.TypeError(f"{fn}: argument 'q' must be a torch tensor, got {type(q).__name__}")
    if q.dim() != 3:
        raise C.ValueError(f"{fn}: argument 'q' must be [s_q, h_q, d_qk], got shape {tuple(q.shape)}")
    if isinstance(d_v, bool) or not isinstance(d_v, int) or d_v <= 0:
        raise C.ValueError(f'{fn}: d_v must be a positive int, got {d_v!r}')
    s_q, h_q = q.shape[0], q.shape[1]
    out = torch.empty((s_q, h_q, d_v), dtype=torch.bfloat16)
    max_logits = torch.empty((s_q, h_q), dtype=torch.float32)
    lse = torch.empty((s_q, h_q), dtype=torch.float32)
    C.flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out, max_logits, lse)
    return out, max_logits, lse
