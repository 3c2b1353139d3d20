"""deep_gemm's MQA logits (the lightning indexer), non-paged: upstream's signatures, the padded
logits view upstream returns (row stride from ts_mqa_logits_row_stride)."""
import torch

from _tilestack_py import C, pair

__all__ = ['fp8_fp4_mqa_logits', 'fp8_mqa_logits', 'get_paged_mqa_logits_metadata',
           'fp8_fp4_paged_mqa_logits', 'fp8_paged_mqa_logits']


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


def _varlen(fn, indices, rows, next_n):
    """SM100's varlen mode: token rows (next_n = 1) with indices int32 [rows] naming each row's
    request; a request is a maximal run of equal indices. Returns each row's run start."""
    if not isinstance(indices, torch.Tensor):
        raise C.TypeError(f"{fn}: argument 'indices' must be a torch tensor, got {type(indices).__name__}")
    if indices.dtype != torch.int32:
        raise C.TypeError(f"{fn}: argument 'indices' must be torch.int32, got {indices.dtype}")
    if next_n != 1:
        raise C.ValueError(f'{fn}: the varlen mode (indices) needs next_n = 1, got {next_n}')
    if indices.dim() != 1 or indices.shape[0] != rows or not indices.is_contiguous():
        raise C.ValueError(f"{fn}: argument 'indices' must be a contiguous [{rows}] tensor, got shape "
                           f'{tuple(indices.shape)} with strides {indices.stride()}')
    row = torch.arange(rows, dtype=torch.int64)
    first = torch.ones(rows, dtype=torch.bool)
    first[1:] = indices[1:] != indices[:-1]
    return torch.where(first, row, 0).cummax(0).values


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    """The [num_sms + 1, 2] int32 schedule for context_lens [B, next_n] (2-D only, as
    upstream). num_sms is the worker count the caller passes (deep_gemm.get_num_sms()).
    With indices (varlen), B counts token rows and next_n is 1: the schedule is the one of
    those rows (the values are opaque; the logits call checks them)."""
    fn = 'deep_gemm.get_paged_mqa_logits_metadata'
    if indices is not None and isinstance(context_lens, torch.Tensor) and context_lens.dim() == 2:
        _varlen(fn, indices, context_lens.shape[0], context_lens.shape[1])
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
        raise C.ValueError(f'{fn}: num_sms must be a positive int, got {num_sms!r}')
    out = torch.empty((num_sms + 1, 2), dtype=torch.int32)
    C.paged_mqa_logits_metadata(context_lens, block_kv, num_sms, out)
    return out


def _paged(fn, legacy, q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta,
           max_context_len, clean_logits, logits_dtype, indices):
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise C.TypeError(f'{fn}: logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}')
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise C.ValueError(f"{fn}: argument 'q' must be a 4-D tensor [B, next_n, H, D]")
    rows = q.shape[0] * q.shape[1]
    if indices is not None:
        # every row of a request reads the block-table row of the request's first token (as
        # upstream's varlen scheduler); each row keeps its own context length
        starts = _varlen(fn, indices, q.shape[0], q.shape[1])
        if isinstance(block_table, torch.Tensor) and block_table.dim() == 2 and block_table.shape[0] == rows:
            block_table = block_table.index_select(0, starts)
    stride = C.paged_mqa_logits_row_stride(max_context_len, logits_dtype == torch.bfloat16)
    out = torch.empty_strided((rows, max_context_len), (stride, 1), dtype=logits_dtype)
    C.paged_mqa_logits(legacy, q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta,
                       max_context_len, clean_logits, out)
    return out


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                             max_context_len, clean_logits=False, logits_dtype=torch.float32,
                             indices=None):
    """Decode logits [B·next_n, max_context_len] (upstream's padded view) over the fused paged
    KV cache; q = (q, q_sf or None). Columns past a row's context are unspecified unless
    clean_logits (then -inf; upstream forbids clean_logits with 2-D context lens). Varlen
    (indices int32 [B], next_n = 1): B token rows, a request being a run of equal indices whose
    rows all read the block-table row of its first token; row t scores its context_lens[t, 0]."""
    fn = 'deep_gemm.fp8_fp4_paged_mqa_logits'
    q_, q_sf = pair(q, fn, 'q')
    return _paged(fn, False, q_, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta,
                  max_context_len, clean_logits, logits_dtype, indices)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                         max_context_len, clean_logits=False, indices=None):
    """The legacy form: q e4m3 without scale, f32 logits."""
    return _paged('deep_gemm.fp8_paged_mqa_logits', True, q, None, kv_cache, weights, context_lens,
                  block_table, schedule_meta, max_context_len, clean_logits, torch.float32, indices)
