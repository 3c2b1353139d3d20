"""deep_gemm's MQA logits (the lightning indexer), non-paged: upstream's signatures, the padded
logits view upstream returns (row stride from ts_mqa_logits_row_stride)."""
import torch

from _tilestack_py import C, pair

__all__ = ['fp8_fp4_mqa_logits', 'fp8_mqa_logits']


def _logits(fn, q, kv, weights, max_seqlen_k, logits_dtype):
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise C.TypeError(f'{fn}: logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}')
    for name, t, nd in (('q', q, 3), ('kv', kv, 2)):
        if not isinstance(t, torch.Tensor):
            raise C.TypeError(f"{fn}: argument '{name}' must be a torch tensor, got {type(t).__name__}")
        if t.dim() != nd:
            raise C.ValueError(f"{fn}: argument '{name}' must be {nd}-D, got shape {tuple(t.shape)}")
    s, s_kv = q.shape[0], kv.shape[0]
    stride = C.mqa_logits_row_stride(s_kv, max_seqlen_k, logits_dtype == torch.bfloat16)
    cols = max_seqlen_k if max_seqlen_k else s_kv
    return torch.empty_strided((s, cols), (stride, 1), dtype=logits_dtype)


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                       max_seqlen_k=0, logits_dtype=torch.float32):
    """logits[i, j] = kv_sf[j] · Σ_h weights[i, h] · relu(q[i, h] · kv[j]) for ks[i] <= j < ke[i];
    q = (q [S, H, D] e4m3 or [S, H, D/2] int8 fp4, q_sf None or int32 [S, H]), kv = (kv, kv_sf).
    Returns the [S, S_kv] (or [S, max_seqlen_k]) logits view with upstream's padded row stride."""
    fn = 'deep_gemm.fp8_fp4_mqa_logits'
    q_, q_sf = pair(q, fn, 'q')
    kv_, kv_sf = pair(kv, fn, 'kv')
    out = _logits(fn, q_, kv_, weights, max_seqlen_k, logits_dtype)
    C.mqa_logits(False, q_, q_sf, kv_, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                 clean_logits, max_seqlen_k, out)
    return out


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                   max_seqlen_k=0):
    """The legacy form: q e4m3 [S, H, D] without scale, kv = (kv e4m3 [S_kv, D], kv_sf f32
    [S_kv]), f32 logits."""
    fn = 'deep_gemm.fp8_mqa_logits'
    kv_, kv_sf = pair(kv, fn, 'kv')
    out = _logits(fn, q, kv_, weights, max_seqlen_k, torch.float32)
    C.mqa_logits(True, q, None, kv_, kv_sf, weights, cu_seq_len_k_start, cu_seq_len_k_end,
                 clean_logits, max_seqlen_k, out)
    return out
