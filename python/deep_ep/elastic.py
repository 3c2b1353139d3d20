"""deep_ep.ElasticBuffer and deep_ep.EPHandle (DeepEP V2, upstream deep_ep/buffers/elastic.py) on
CPU over libtilestack's ts_ep_elastic_* (ep_elastic.h).

Communicators as for deep_ep.Buffer (an mpi4py communicator, `comm=` or in `group`'s place, or
a torch.distributed group under mpirun). Calls finish before they return: every EventOverlap is
a completed event. Rows are always in a deterministic order (source rank, source token; expanded
rows grouped by local expert, then by received row and top-k slot), with or without
`deterministic`. Argument errors the library finds are reported on every rank (the rank at
fault gets the specific exception naming the argument, the others RuntimeError naming that
rank); Python-level type errors (a handle or bias of the wrong type, a non-int count) are raised
locally, before any collective. Differences: docs/python.md (deep_ep ElasticBuffer table) and
docs/ep.md ("V2 ElasticBuffer")."""
import operator
from contextlib import contextmanager

import torch

from _tilestack_py import C, missing, tensor_of
from _tilestack_py.comm import BufferLifetime, resolve_comm

from . import _HAVE_EP, _NO_EP, EventOverlap, _check_bool, _unpack_bias

__all__ = ['ElasticBuffer', 'EPHandle']


def _int(fn, name, v):
    if isinstance(v, bool):
        raise C.TypeError(f"{fn}: argument '{name}' must be an int, got bool")
    try:
        return operator.index(v)
    except TypeError:
        raise C.TypeError(f"{fn}: argument '{name}' must be an int, got {type(v).__name__}") from None


def _group_size(fn, group):
    """The rank count of an mpi4py communicator, a torch.distributed group, or an int."""
    if isinstance(group, int) and not isinstance(group, bool):
        return group
    if hasattr(group, 'Get_size'):
        return group.Get_size()
    if hasattr(group, 'size'):
        return group.size()
    raise C.TypeError(f"{fn}: argument 'group' must be a torch.distributed group, an mpi4py communicator "
                      f"or a rank count, got {type(group).__name__}")


class EPHandle:
    """The routing of one ElasticBuffer.dispatch: reused by a cached dispatch and consumed by
    combine. Fields as upstream; the tensors are copies of the library handle's arrays (the
    library keeps its own, so editing them changes nothing). dst_buffer_slot_idx,
    token_metadata_at_forward and channel_linked_list describe GPU queues and stay None.
    recv_src_metadata: int32 [num_recv_tokens, 2 + num_topk] = (source rank, source token index,
    then per top-k slot the expanded row or -1)."""

    def __init__(self, do_expand, num_experts, expert_alignment, num_max_tokens_per_rank, num_sms, topk_idx,
                 num_recv_tokens, num_expanded_tokens, num_recv_tokens_per_expert_list,
                 psum_num_recv_tokens_per_scaleup_rank, psum_num_recv_tokens_per_expert,
                 num_unaligned_recv_tokens_per_expert, recv_src_metadata, dst_buffer_slot_idx=None,
                 token_metadata_at_forward=None, channel_linked_list=None):
        self.do_expand = do_expand
        self.num_experts = num_experts
        self.expert_alignment = expert_alignment
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_sms = num_sms
        self.topk_idx = topk_idx
        self.num_recv_tokens = num_recv_tokens
        self.num_expanded_tokens = num_expanded_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list
        self.psum_num_recv_tokens_per_scaleup_rank = psum_num_recv_tokens_per_scaleup_rank
        self.psum_num_recv_tokens_per_expert = psum_num_recv_tokens_per_expert
        self.num_unaligned_recv_tokens_per_expert = num_unaligned_recv_tokens_per_expert
        self.recv_src_metadata = recv_src_metadata
        self.dst_buffer_slot_idx = dst_buffer_slot_idx
        self.token_metadata_at_forward = token_metadata_at_forward
        self.channel_linked_list = channel_linked_list
        self.cached_recv_src_metadata_before_sort = None
        self._cap = None  # the library's handle (set by ElasticBuffer.dispatch)
        self._num_tokens = self._num_topk = 0

    @classmethod
    def _of(cls, cap, num_ranks, user_topk_idx):
        (do_expand, e, a, t, sms, n, k, n_recv, n_exp, topk, psum_rank, psum_expert, counts, unaligned,
         meta) = C.ep_elastic_handle_info(cap, num_ranks)
        h = cls(do_expand, e, a, t, sms, tensor_of(topk, True) if user_topk_idx is None else user_topk_idx,
                n_recv, n_exp, counts, tensor_of(psum_rank, True), tensor_of(psum_expert, True),
                tensor_of(unaligned, True), tensor_of(meta, True))
        h._cap, h._num_tokens, h._num_topk = cap, n, k
        return h

    def deterministic_sort(self, do_cpu_sync, is_cached_dispatch, recv_x, recv_sf, recv_topk_idx, recv_topk_weights,
                           channel_linked_list):
        """Upstream's deterministic epilogue. The library's order is deterministic already, so
        nothing is permuted: the call checks the handle (ts_ep_elastic_handle_deterministic_sort)
        and keeps upstream's copy of the metadata before the sort."""
        if self._cap is None:
            raise C.TypeError('deep_ep.EPHandle.deterministic_sort: this handle was not returned by '
                              'ElasticBuffer.dispatch')
        if not is_cached_dispatch:
            self.cached_recv_src_metadata_before_sort = self.recv_src_metadata.clone()
        C.ep_elastic_handle_sort(self._cap)


_ENGRAM = 'Engram (remote KV fetch / write) is not built (ts_ep_elastic_engram_*: TS_ERR_UNSUPPORTED)'
_PP = 'pipeline-parallel send / recv is not built (ts_ep_elastic_pp_*: TS_ERR_UNSUPPORTED)'
_AGRS = 'AGRS all-gather sessions are not built (ts_ep_elastic_*agrs*: TS_ERR_UNSUPPORTED)'


class ElasticBuffer(BufferLifetime):
    """DeepEP V2's buffer: expert-parallel dispatch / combine (shared memory inside a node, MPI
    between nodes) with no separate layout call, and the expanded per-expert layout. Size it with
    num_bytes (a multiple of 2 MiB) or with the MoE settings (num_max_tokens_per_rank, hidden,
    num_topk, use_fp8_dispatch; see get_buffer_size_hint)."""

    _c_destroy, _api = 'ep_elastic_destroy', 'deep_ep.ElasticBuffer'

    def __init__(self, group=None, num_bytes=None, num_cpu_bytes=0, num_max_tokens_per_rank=0, hidden=0, num_topk=0,
                 use_fp8_dispatch=False, deterministic=False, allow_hybrid_mode=True, allow_multiple_reduction=True,
                 prefer_overlap_with_compute=True, sl_idx=3, num_allocated_qps=0, num_cpu_timeout_secs=300,
                 num_gpu_timeout_secs=100, explicitly_destroy=False, comm=None):
        fn = 'deep_ep.ElasticBuffer'
        self._cap = None
        self._owned_comm = None
        if not _HAVE_EP:
            raise NotImplementedError(f'{fn} is not available in tilestack: {_NO_EP}')
        num_bytes = 0 if num_bytes is None else _int(fn, 'num_bytes', num_bytes)
        if _int(fn, 'num_cpu_bytes', num_cpu_bytes):
            raise NotImplementedError(f'{fn}: num_cpu_bytes (the CPU segment of Engram storage) is not available in '
                                      f'tilestack: {_ENGRAM}')
        ints = {name: _int(fn, name, v) for name, v in (
            ('num_max_tokens_per_rank', num_max_tokens_per_rank), ('hidden', hidden), ('num_topk', num_topk),
            ('sl_idx', sl_idx), ('num_allocated_qps', num_allocated_qps))}
        for name, v in (('use_fp8_dispatch', use_fp8_dispatch), ('deterministic', deterministic),
                        ('allow_hybrid_mode', allow_hybrid_mode), ('allow_multiple_reduction', allow_multiple_reduction),
                        ('prefer_overlap_with_compute', prefer_overlap_with_compute)):
            _check_bool(fn, name, v)
        for name, v in (('num_cpu_timeout_secs', num_cpu_timeout_secs), ('num_gpu_timeout_secs', num_gpu_timeout_secs)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise C.TypeError(f"{fn}: argument '{name}' must be a number, got {type(v).__name__}")
        comm, self._owned_comm, handle, group = resolve_comm(fn, group, comm)
        self.group = group
        self.comm = comm
        self.allow_hybrid_mode = bool(allow_hybrid_mode)
        self.allow_multiple_reduction = bool(allow_multiple_reduction)
        self.prefer_overlap_with_compute = bool(prefer_overlap_with_compute)
        self.deterministic = bool(deterministic)
        self.num_max_tokens_per_rank = ints['num_max_tokens_per_rank']
        self.num_allocated_qps = ints['num_allocated_qps']
        self.explicitly_destroy = explicitly_destroy
        self._cap = C.ep_elastic_new(handle, num_bytes, ints['num_max_tokens_per_rank'], ints['hidden'],
                                     ints['num_topk'], use_fp8_dispatch, deterministic, allow_hybrid_mode,
                                     allow_multiple_reduction, prefer_overlap_with_compute, ints['num_allocated_qps'],
                                     float(num_cpu_timeout_secs), 0)
        self.rank_idx, self.num_ranks, self.num_bytes = C.ep_elastic_info(self._cap)
        self.num_scaleout_ranks, self.num_scaleup_ranks = self.get_logical_domain_size()
        self.scaleout_rank_idx = self.rank_idx // self.num_scaleup_ranks
        self.scaleup_rank_idx = self.rank_idx % self.num_scaleup_ranks
        self.num_rdma_ranks, self.num_nvlink_ranks = self.get_physical_domain_size()

    # ---- sizes and settings ----
    @staticmethod
    def get_buffer_size_hint(group, num_max_tokens_per_rank, hidden, num_topk=0, use_fp8_dispatch=False,
                             allow_hybrid_mode=True, allow_multiple_reduction=True):
        """Bytes (a multiple of 2 MiB) for dispatch + combine of up to num_max_tokens_per_rank
        tokens per rank; group: a torch.distributed group, an mpi4py communicator or a rank
        count. num_topk 0 sizes for top-32; fp8 scales are hidden / 128 f32 per token."""
        fn = 'deep_ep.ElasticBuffer.get_buffer_size_hint'
        return C.ep_elastic_size_hint(_group_size(fn, group), _int(fn, 'num_max_tokens_per_rank', num_max_tokens_per_rank),
                                      _int(fn, 'hidden', hidden), _int(fn, 'num_topk', num_topk), use_fp8_dispatch)

    get_engram_storage_size_hint = staticmethod(missing('deep_ep.ElasticBuffer.get_engram_storage_size_hint', _ENGRAM))
    get_pp_buffer_size_hint = staticmethod(missing('deep_ep.ElasticBuffer.get_pp_buffer_size_hint', _PP))
    get_agrs_num_max_session_bytes = staticmethod(missing('deep_ep.ElasticBuffer.get_agrs_num_max_session_bytes', _AGRS))
    get_agrs_buffer_size_hint = staticmethod(missing('deep_ep.ElasticBuffer.get_agrs_buffer_size_hint', _AGRS))

    @staticmethod
    def capture():
        return EventOverlap()

    def get_comm_stream(self):
        raise NotImplementedError('deep_ep.ElasticBuffer.get_comm_stream is not available in tilestack: no streams on CPU')

    def barrier(self, use_comm_stream=True, with_cpu_sync=False, sequential=True):
        """Collective: every rank arrives, then all leave (the flags have nothing to choose on CPU)."""
        C.ep_elastic_barrier(self._buf('barrier'))

    def get_physical_domain_size(self):
        """(num_rdma_ranks, num_nvlink_ranks) = (nodes, ranks per node)."""
        return C.ep_elastic_domain(self._buf('get_physical_domain_size'), False)

    def get_logical_domain_size(self):
        """(num_scaleout_ranks, num_scaleup_ranks): the same split (no hybrid remapping)."""
        return C.ep_elastic_domain(self._buf('get_logical_domain_size'), True)

    def get_theoretical_num_sms(self, num_experts, num_topk, num_scaleout_topk=0, rdma_gbs=0, nvlink_gbs=0,
                                sm_read_gbs=200, sm_write_gbs=50):
        """Threads a dispatch / combine should use: min(pool, 4 x ranks per node), even, >= 1
        (the copies are memory-bound). The bandwidth arguments are accepted and unused."""
        fn = 'deep_ep.ElasticBuffer.get_theoretical_num_sms'
        if _int(fn, 'num_scaleout_topk', num_scaleout_topk) != 0:
            raise C.ValueError(f"{fn}: argument 'num_scaleout_topk' must be 0 (as upstream)")
        return C.ep_elastic_num_sms(self._buf('get_theoretical_num_sms'), _int(fn, 'num_experts', num_experts),
                                    _int(fn, 'num_topk', num_topk))

    def get_theoretical_num_qps(self, num_sms):
        """MPI has no queue pairs: num_sms."""
        fn = 'deep_ep.ElasticBuffer.get_theoretical_num_qps'
        return C.ep_elastic_num_qps(self._buf('get_theoretical_num_qps'), _int(fn, 'num_sms', num_sms))

    # ---- dispatch / combine ----
    def dispatch(self, x, topk_idx=None, topk_weights=None, cumulative_local_expert_recv_stats=None, num_experts=None,
                 num_max_tokens_per_rank=None, expert_alignment=None, num_sms=0, num_qps=0, previous_event=None,
                 previous_event_before_epilogue=None, async_with_compute_stream=False, allocate_on_comm_stream=False,
                 handle=None, do_handle_copy=True, do_cpu_sync=None, do_expand=False, do_zero_padding=False,
                 use_tma_aligned_col_major_sf=False):
        """-> (recv_x or (recv_x, recv_sf), recv_topk_idx, recv_topk_weights, handle, event).
        Received tensors are fresh copies. With do_expand: one row per (received token, local
        expert it selected), grouped by expert, each group padded to expert_alignment;
        recv_topk_weights is then 1-D (one per expanded row, 0 in padding) and recv_topk_idx
        stays per received token. Cached (handle given): the handle's routing replayed; the
        handle returned is that one; recv_topk_idx / recv_topk_weights only with topk_weights."""
        fn = 'deep_ep.ElasticBuffer.dispatch'
        cap = self._buf('dispatch')
        if isinstance(x, tuple):
            if len(x) != 2:
                raise C.TypeError(f"{fn}: argument 'x' must be a tensor or an (x, sf) pair")
            x, sf = x
        else:
            sf = None
        cached = handle is not None
        if cached and (not isinstance(handle, EPHandle) or handle._cap is None):
            raise C.TypeError(f"{fn}: argument 'handle' must be an EPHandle returned by ElasticBuffer.dispatch")
        for name, v in (('do_handle_copy', do_handle_copy), ('do_expand', do_expand),
                        ('do_zero_padding', do_zero_padding),
                        ('use_tma_aligned_col_major_sf', use_tma_aligned_col_major_sf)):
            _check_bool(fn, name, v)
        if do_cpu_sync is None:
            do_cpu_sync = not cached
        _check_bool(fn, 'do_cpu_sync', do_cpu_sync)
        # None: the handle's, the constructor's (num_max_tokens_per_rank) or upstream's 1 (alignment)
        e = 0 if num_experts is None else _int(fn, 'num_experts', num_experts)
        t = 0 if num_max_tokens_per_rank is None else _int(fn, 'num_max_tokens_per_rank', num_max_tokens_per_rank)
        a = (0 if cached else 1) if expert_alignment is None else _int(fn, 'expert_alignment', expert_alignment)
        rx, rs, rti, rtw, _, _, hcap = C.ep_elastic_dispatch(
            cap, x, sf, topk_idx, topk_weights, cumulative_local_expert_recv_stats, e, t, a,
            _int(fn, 'num_sms', num_sms), _int(fn, 'num_qps', num_qps), handle._cap if cached else None,
            do_cpu_sync, do_expand, do_zero_padding, use_tma_aligned_col_major_sf)
        recv_x, recv_sf = tensor_of(rx, True), tensor_of(rs, True)
        recv_topk_idx, recv_topk_weights = tensor_of(rti, True), tensor_of(rtw, True)
        if not cached:
            handle = EPHandle._of(hcap, self.num_ranks, None if do_handle_copy else topk_idx)
        if self.deterministic:
            handle.deterministic_sort(do_cpu_sync, cached, recv_x, recv_sf, recv_topk_idx, recv_topk_weights, None)
        recv = (recv_x, recv_sf) if sf is not None else recv_x
        return recv, recv_topk_idx, recv_topk_weights, handle, EventOverlap()

    def combine(self, x, handle, topk_weights=None, bias=None, num_sms=0, num_qps=0, previous_event=None,
                previous_event_before_epilogue=None, async_with_compute_stream=False, allocate_on_comm_stream=False):
        """-> (combined_x bf16 [num_tokens, hidden], combined_topk_weights f32 [num_tokens, num_topk]
        or None, event). Not expanded: the unweighted sum of a token's copies over ranks in
        ascending order (+ bias), f32, one rounding. Expanded: each expert rank first reduces a
        token's rows in top-k order, weighted by topk_weights (1-D, one per expanded row; 1
        without), with fmaf and one bf16 rounding; then that sum. num_sms 0: the handle's."""
        fn = 'deep_ep.ElasticBuffer.combine'
        cap = self._buf('combine')
        if not isinstance(handle, EPHandle) or handle._cap is None:
            raise C.TypeError(f"{fn}: argument 'handle' must be an EPHandle returned by ElasticBuffer.dispatch")
        bias0, bias1 = _unpack_bias(fn, bias)
        # Shapes of bad arguments are left to the C call, which reports them on every rank.
        hidden = x.shape[1] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
        combined_x = torch.empty((handle._num_tokens, hidden), dtype=torch.bfloat16)
        combined_w = None
        if topk_weights is not None:
            combined_w = torch.empty((handle._num_tokens, handle._num_topk), dtype=torch.float32)
        C.ep_elastic_combine(cap, handle._cap, x, topk_weights, bias0, bias1, _int(fn, 'num_sms', num_sms),
                             combined_x, combined_w)
        return combined_x, combined_w, EventOverlap()

    # ---- parts of V2 not built: the library reports each unsupported (NotImplementedError) ----
    def engram_write(self, storage, sf=None):
        C.ep_elastic_unsupported(self._buf('engram_write'), 'engram_write')

    def engram_fetch(self, indices, num_qps=0, use_tma_aligned_col_major_sf=False):
        C.ep_elastic_unsupported(self._buf('engram_fetch'), 'engram_fetch')

    def pp_set_config(self, num_max_tensor_bytes, num_max_inflight_tensors):
        C.ep_elastic_unsupported(self._buf('pp_set_config'), 'pp_set_config')

    def pp_send(self, t, dst_rank_idx, num_sms=0):
        C.ep_elastic_unsupported(self._buf('pp_send'), 'pp_send')

    def pp_recv(self, t, src_rank_idx, num_sms=0):
        C.ep_elastic_unsupported(self._buf('pp_recv'), 'pp_recv')

    def agrs_set_config(self, num_max_session_bytes, num_max_all_gathers_per_session):
        C.ep_elastic_unsupported(self._buf('agrs_set_config'), 'agrs_set_config')

    def create_agrs_session(self):
        C.ep_elastic_unsupported(self._buf('create_agrs_session'), 'create_agrs_session')

    def destroy_agrs_session(self):
        C.ep_elastic_unsupported(self._buf('destroy_agrs_session'), 'destroy_agrs_session')

    @contextmanager
    def agrs_new_session(self, enabled=True):
        if not enabled:
            yield
            return
        self.create_agrs_session()
        try:
            yield
        finally:
            self.destroy_agrs_session()

    def all_gather(self, t):
        C.ep_elastic_unsupported(self._buf('all_gather'), 'all_gather')

    agrs_get_inplace_tensor = missing('deep_ep.ElasticBuffer.agrs_get_inplace_tensor', _AGRS)
