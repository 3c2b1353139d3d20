"""deep_ep (deepseek-ai/DeepEP) on CPU: V1 `deep_ep.Buffer` over libtilestack's ts_ep_* (ep.h),
and V2 `deep_ep.ElasticBuffer` / `deep_ep.EPHandle` over ts_ep_elastic_* (elastic.py).

Ranks are MPI processes (`mpirun`): a Buffer takes an mpi4py communicator (`comm=`, as upstream)
or a torch.distributed group whose ranks are the MPI world's ranks (gloo / MPI backend under
mpirun); that group is mapped to an MPI communicator of the same ranks in the same order.
Calls finish before they return, so every EventOverlap is a completed event. Differences from
upstream are listed in docs/python.md (deep_ep tables) and docs/ep.md."""
import os

import torch

from _tilestack_py import C, missing, tensor_of
from _tilestack_py.comm import BufferLifetime, resolve_comm

__all__ = ['Buffer', 'Config', 'ElasticBuffer', 'EPHandle', 'EventOverlap', 'topk_idx_t']

topk_idx_t = torch.int64

_HAVE_EP = bool(getattr(C, 'have_ep', 0))
_NO_EP = 'libtilestack was built without MPI, so it has no ts_ep_* (install Open MPI and rebuild)'

class EventOverlap:
    """A completed event: CPU calls return when their work is done, so waiting is a no-op."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Config:
    """Upstream's Config(num_sms, nvl_send, nvl_recv, rdma_send=..., rdma_recv=...). num_sms is the
    number of threads a call may use (0 = the tilestack pool); the chunk sizes are checked
    (>= 1) and otherwise unused (no rings)."""

    def __init__(self, num_sms, num_max_nvl_chunked_send_tokens, num_max_nvl_chunked_recv_tokens,
                 num_max_rdma_chunked_send_tokens=6, num_max_rdma_chunked_recv_tokens=256):
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def _tuple(self):
        return (self.num_sms, self.num_max_nvl_chunked_send_tokens, self.num_max_nvl_chunked_recv_tokens,
                self.num_max_rdma_chunked_send_tokens, self.num_max_rdma_chunked_recv_tokens)

    def __repr__(self):
        return 'Config(%d, %d, %d, %d, %d)' % self._tuple()

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        raise NotImplementedError(
            'deep_ep.Config.get_nvl_buffer_size_hint is not available in tilestack: its ring-based size '
            'has no meaning without rings; use Buffer.get_buffer_size_hint(num_ranks, num_max_tokens_per_rank, '
            'hidden, num_topk, num_scales, use_fp8_dispatch) (ts_ep_get_buffer_size_hint)')

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        raise NotImplementedError(
            'deep_ep.Config.get_rdma_buffer_size_hint is not available in tilestack: use '
            'Buffer.get_buffer_size_hint / ts_ep_get_internode_buffer_size_hint instead')


class _Routing:
    """The library's routing of one normal dispatch, hung on the handle's key tensor (recv_src_idx
    intranode, recv_gbl_rank_prefix_sum internode) so that a tuple rebuilt from the same tensors
    still finds it."""

    __slots__ = ('cap', 'num_tokens', 'is_token_in_rank')


def _handle_routing(fn, handle, num_rdma_ranks):
    """The _Routing of a handle dispatch returned (the tuple, or one rebuilt from its tensors)."""
    n = 10 if num_rdma_ranks > 1 else 6
    if isinstance(handle, (tuple, list)) and len(handle) == n:
        key = handle[6] if n == 10 else handle[3]
        r = getattr(key, '_ts_routing', None) if isinstance(key, torch.Tensor) else None
        if r is not None:
            return r
    raise C.TypeError(f"{fn}: argument 'handle' must be the {n}-tuple returned by dispatch "
                      f"(or a tuple of the same tensors)")


def _intranode_handle(comm, rank, rank_prefix, is_token_in_rank, recv_src_idx):
    """Upstream's (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix,
    recv_src_idx, is_token_in_rank, send_head). rank_prefix_matrix[s][d] (int32 [R, R]): the rows
    sources 0..s send to rank d, each rank's column all-gathered (one small collective; every
    rank reaches it, since a failed dispatch raises on every rank). send_head[t][d] (int32 [N, R]):
    the row of token t in rank d's recv_x, -1 where it does not go (upstream: its ring slot). No
    channels on a CPU: both channel matrices are None."""
    cols = comm.allgather(list(rank_prefix[1:]))
    rpm = torch.tensor(cols, dtype=torch.int32).t().contiguous()
    itir = is_token_in_rank.to(torch.bool)
    base = rpm[rank - 1] if rank > 0 else torch.zeros(rpm.shape[1], dtype=torch.int32)
    pos = torch.cumsum(itir.to(torch.int32), 0, dtype=torch.int32) - 1 + base
    send_head = torch.where(itir, pos, torch.full_like(pos, -1))
    return (rpm, None, None, recv_src_idx, is_token_in_rank, send_head)


def _internode_handle(rank_prefix, is_token_in_rank):
    """Upstream's 10-tuple: is_token_in_rank and recv_gbl_rank_prefix_sum (int32 [R], inclusive:
    the rows of sources 0..s) are filled; the RDMA / NVL channel matrices, the RDMA-level prefix,
    recv_src_meta and the send heads describe GPU queues tilestack does not have (None)."""
    gbl = torch.tensor(rank_prefix[1:], dtype=torch.int32)
    return (is_token_in_rank, None, None, None, None, None, gbl, None, None, None)


def _check_bool(fn, name, v):
    if not isinstance(v, (bool, int)):
        raise C.TypeError(f"{fn}: argument '{name}' must be a bool, got {type(v).__name__}")


def _unpack_bias(fn, bias):
    """combine's bias: None, a tensor, or a pair of tensors -> (bias0, bias1)."""
    if bias is None or isinstance(bias, torch.Tensor):
        return bias, None
    if isinstance(bias, (tuple, list)):
        if len(bias) != 2:
            raise C.ValueError(f"{fn}: argument 'bias' must be a tensor or a pair of tensors")
        return bias[0], bias[1]
    raise C.TypeError(f"{fn}: argument 'bias' must be a tensor or a pair of tensors")


class Buffer(BufferLifetime):
    """Expert-parallel dispatch / combine buffers over MPI (shared memory inside a node, MPI
    messages between nodes). num_nvl_bytes: the per-rank shared segment (normal mode; size it
    with get_buffer_size_hint); num_rdma_bytes: the low-latency area (or the internode staging).
    Both multiples of 128."""

    num_sms: int = 20

    _c_destroy, _api = 'ep_buffer_destroy', 'deep_ep.Buffer'

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False,
                 use_fabric=False, explicitly_destroy=False, enable_shrink=False, comm=None):
        fn = 'deep_ep.Buffer'
        self._cap = None
        if not _HAVE_EP:
            raise NotImplementedError(f'{fn} is not available in tilestack: {_NO_EP}')
        if enable_shrink:
            raise NotImplementedError(f'{fn}: enable_shrink (rank masking) is not available in tilestack')
        for name, v in (('num_nvl_bytes', num_nvl_bytes), ('num_rdma_bytes', num_rdma_bytes),
                        ('num_qps_per_rank', num_qps_per_rank)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise C.TypeError(f"{fn}: argument '{name}' must be an int, got {type(v).__name__}")
        self._owned_comm = None
        comm, self._owned_comm, handle, group = resolve_comm(fn, group, comm)
        self.group = group
        self.comm = comm
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = bool(low_latency_mode)
        self.explicitly_destroy = explicitly_destroy
        timeout = float(os.environ.get('TS_EP_TIMEOUT_S', '0') or 0)
        self._cap = C.ep_buffer_new(handle, num_nvl_bytes, num_rdma_bytes, bool(low_latency_mode),
                                    num_qps_per_rank, timeout, 0)
        self.rank, self.group_size, self.ranks_per_node = C.ep_buffer_info(self._cap)
        self.num_rdma_ranks = self.group_size // self.ranks_per_node

    # ---- static helpers ----
    @staticmethod
    def is_sm90_compiled():
        return False

    @staticmethod
    def set_num_sms(new_num_sms):
        assert new_num_sms % 2 == 0, 'The SM count must be even'
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture():
        return EventOverlap()

    @staticmethod
    def get_dispatch_config(num_ranks):
        """tilestack's default config for any num_ranks >= 1 (upstream: a tuned table)."""
        return Config(*C.ep_config(0, num_ranks))

    @staticmethod
    def get_combine_config(num_ranks):
        return Config(*C.ep_config(1, num_ranks))

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts):
        return C.ep_ll_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts)

    @staticmethod
    def get_buffer_size_hint(num_ranks, num_max_tokens_per_rank, hidden, num_topk=0, num_scales=0,
                             use_fp8_dispatch=False):
        """tilestack extra (V2 ElasticBuffer style): num_nvl_bytes for normal dispatch + combine when
        every rank may send up to num_max_tokens_per_rank tokens (ts_ep_get_buffer_size_hint)."""
        return C.ep_size_hint(num_ranks, num_max_tokens_per_rank, hidden, num_topk, num_scales, use_fp8_dispatch)

    def get_comm_stream(self):
        raise NotImplementedError('deep_ep.Buffer.get_comm_stream is not available in tilestack: no streams on CPU')

    def get_local_buffer_tensor(self, dtype, size=None, offset=0, use_rdma_buffer=False):
        raise NotImplementedError('deep_ep.Buffer.get_local_buffer_tensor is not available in tilestack: the raw '
                                  'segment is not exposed (ts_ep_get_combine_buffer gives the zero-copy combine input)')

    # ---- normal mode ----
    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        fn = 'deep_ep.Buffer.get_dispatch_layout'
        cap = self._buf('get_dispatch_layout')
        if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 2:
            raise C.ValueError(f"{fn}: argument 'topk_idx' must be a 2-D tensor [num_tokens, num_topk]")
        n = topk_idx.shape[0]  # a local call: raising here leaves no peer waiting
        r = self.group_size
        ntpr = torch.empty(r, dtype=torch.int32)
        ntprdma = torch.empty(self.num_rdma_ranks, dtype=torch.int32) if self.num_rdma_ranks > 1 else None
        if isinstance(num_experts, bool) or not isinstance(num_experts, int):
            raise C.TypeError(f"{fn}: argument 'num_experts' must be an int")
        ntpe = torch.empty(max(num_experts, 0), dtype=torch.int32)
        itir = torch.empty((n, r), dtype=torch.bool)
        C.ep_layout(cap, topk_idx, num_experts, ntpr, ntprdma, ntpe, itir)
        return ntpr, ntprdma, ntpe, itir, EventOverlap()

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment=1, num_worst_tokens=0, config=None, previous_event=None,
                 async_finish=False, allocate_on_comm_stream=False):
        """Returns (recv_x or (recv_x, recv_x_scales), recv_topk_idx, recv_topk_weights,
        num_recv_tokens_per_expert_list, handle, event); cached (handle given): (recv_x, None, None,
        None, None, event). Received tensors are fresh copies; rows in (source rank, source token)
        order."""
        fn = 'deep_ep.Buffer.dispatch'
        cap = self._buf('dispatch')
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        cfg = config._tuple() if config is not None else None
        if handle is not None:
            routing = _handle_routing(fn, handle, self.num_rdma_ranks)
            if topk_idx is not None or topk_weights is not None:
                raise C.ValueError(f"{fn}: cached dispatch (handle given) takes no topk_idx / topk_weights")
            out = C.ep_dispatch(cap, x, x_scales, None, None, None, None, None, routing.is_token_in_rank,
                                expert_alignment, num_worst_tokens, cfg, routing.cap)
        else:
            out = C.ep_dispatch(cap, x, x_scales, topk_idx, topk_weights, num_tokens_per_rank,
                                num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank,
                                expert_alignment, num_worst_tokens, cfg, None)
        rx, rs, rti, rtw, rsrc, per_expert, num_recv, hcap = out
        recv_x = tensor_of(rx, True)
        recv_scales = tensor_of(rs, True)
        recv = (recv_x, recv_scales) if x_scales is not None else recv_x
        if handle is not None:
            return recv, None, None, None, None, EventOverlap()
        routing = _Routing()
        routing.cap, routing.num_tokens, routing.is_token_in_rank = hcap, x.shape[0], is_token_in_rank
        rank_prefix = C.ep_handle_info(hcap, self.group_size)[1]
        if self.num_rdma_ranks > 1:
            h = _internode_handle(rank_prefix, is_token_in_rank)
            h[6]._ts_routing = routing
        else:
            recv_src_idx = tensor_of(rsrc, True)
            h = _intranode_handle(self.comm, self.rank, rank_prefix, is_token_in_rank, recv_src_idx)
            recv_src_idx._ts_routing = routing
        return recv, tensor_of(rti, True), tensor_of(rtw, True), per_expert, h, EventOverlap()

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish=False, allocate_on_comm_stream=False):
        """Unweighted sum of each token's copies (+ bias): (combined_x, combined_topk_weights, event)."""
        fn = 'deep_ep.Buffer.combine'
        cap = self._buf('combine')
        routing = _handle_routing(fn, handle, self.num_rdma_ranks)
        bias0, bias1 = _unpack_bias(fn, bias)
        # Shapes of bad arguments are left to the C call, which reports them on every rank
        # (a local raise here would leave the peers waiting in the collective).
        hidden = x.shape[1] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
        combined_x = torch.empty((routing.num_tokens, hidden), dtype=torch.bfloat16)
        combined_w = None
        if topk_weights is not None:
            k = topk_weights.shape[1] if isinstance(topk_weights, torch.Tensor) and topk_weights.dim() == 2 else 0
            combined_w = torch.empty((routing.num_tokens, k), dtype=torch.float32)
        C.ep_combine(cap, routing.cap, x, topk_weights, bias0, bias1,
                     config._tuple() if config is not None else None, combined_x, combined_w)
        return combined_x, combined_w, EventOverlap()

    # ---- low-latency mode ----
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank, hidden, num_experts):
        C.ep_clean_ll(self._buf('clean_low_latency_buffer'), num_max_dispatch_tokens_per_rank, hidden, num_experts)

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8=True, round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False, use_per_tensor_quantization=False, static_scale=None):
        """Returns (recv_x or (recv_x, recv_x_scales), recv_count, handle, event, hook). Outputs are
        fresh tensors (scales column-major in the last two dims, as upstream); with
        return_recv_hook they are filled when hook() runs."""
        fn = 'deep_ep.Buffer.low_latency_dispatch'
        cap = self._buf('low_latency_dispatch')
        if use_per_tensor_quantization or static_scale is not None:
            raise NotImplementedError(f'{fn}: use_per_tensor_quantization / static_scale are not available in tilestack')
        for name, v in (('num_max_dispatch_tokens_per_rank', num_max_dispatch_tokens_per_rank),
                        ('num_experts', num_experts)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise C.TypeError(f"{fn}: argument '{name}' must be an int")
        r = self.group_size
        hidden = x.shape[1] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
        if num_experts <= 0 or num_experts % r or num_max_dispatch_tokens_per_rank < 0:
            # the C call checks the same (collectively); the shapes below need them first
            el, s = 0, 0
        else:
            el, s = num_experts // r, r * num_max_dispatch_tokens_per_rank
        recv_x = torch.empty((el, s, hidden), dtype=torch.float8_e4m3fn if use_fp8 else torch.bfloat16)
        scales = None
        if use_fp8:
            if use_ue8m0:
                scales = torch.empty((el, hidden // 512, s), dtype=torch.int32).transpose(1, 2)
            else:
                scales = torch.empty((el, hidden // 128, s), dtype=torch.float32).transpose(1, 2)
        recv_count = torch.empty(el, dtype=torch.int32)
        src_info = torch.empty((el, s), dtype=torch.int32)
        layout_range = torch.empty((el, r), dtype=torch.int64)
        hcap, kcap = C.ep_ll_dispatch(cap, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                      cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats,
                                      use_fp8, round_scale, use_ue8m0, return_recv_hook, recv_x, scales,
                                      recv_count, src_info, layout_range, r)
        handle = _LLHandle((src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden, num_experts))
        handle._cap = hcap
        handle._buffer = self
        hook = None
        if kcap is not None:
            keep = (x, topk_idx, recv_x, scales, recv_count, cumulative_local_expert_recv_stats,
                    dispatch_wait_recv_cost_stats)

            def hook(_k=kcap, _h=hcap, _keep=keep, _self=self):
                C.ep_ll_hook_run(_k, _h, src_info, layout_range, r)
        recv = (recv_x, scales) if use_fp8 else recv_x
        return recv, recv_count, handle, EventOverlap(), hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False, zero_copy=False,
                            async_finish=False, return_recv_hook=False, out=None,
                            combine_wait_recv_cost_stats=None):
        """Weighted sum in top-k order: (combined_x, event, hook)."""
        fn = 'deep_ep.Buffer.low_latency_combine'
        cap = self._buf('low_latency_combine')
        if not isinstance(handle, _LLHandle):
            raise C.TypeError(f"{fn}: argument 'handle' must be a handle returned by low_latency_dispatch")
        if out is None:
            n = topk_idx.shape[0] if isinstance(topk_idx, torch.Tensor) and topk_idx.dim() == 2 else 0
            out = torch.empty((n, handle[3]), dtype=torch.bfloat16)
        # zero_copy: the rows are already in the buffer and x is ignored, as upstream
        kcap = C.ep_ll_combine(cap, None if zero_copy else x, topk_idx, topk_weights, handle._cap, use_logfmt, zero_copy,
                               return_recv_hook, out, combine_wait_recv_cost_stats)
        hook = None
        if kcap is not None:
            keep = (x, topk_idx, topk_weights, out, combine_wait_recv_cost_stats, handle)

            def hook(_k=kcap, _keep=keep, _self=self):
                C.ep_ll_hook_run(_k, None, None, None, 0)
        return out, EventOverlap(), hook

    def get_next_low_latency_combine_buffer(self, handle):
        """The zero-copy input of the next low_latency_combine: a bf16 [E/R, R*T, hidden] view of
        this rank's buffer (valid while the buffer lives; its contents until that combine)."""
        fn = 'deep_ep.Buffer.get_next_low_latency_combine_buffer'
        if not isinstance(handle, _LLHandle):
            raise C.TypeError(f"{fn}: argument 'handle' must be a handle returned by low_latency_dispatch")
        t = tensor_of(C.ep_ll_next_combine_buffer(self._buf('get_next_low_latency_combine_buffer'), handle._cap), False)
        return t

    # upstream's shrink / mask API
    low_latency_update_mask_buffer = missing('deep_ep.Buffer.low_latency_update_mask_buffer',
                                             'rank masking (enable_shrink) is not implemented')
    low_latency_query_mask_buffer = missing('deep_ep.Buffer.low_latency_query_mask_buffer',
                                            'rank masking (enable_shrink) is not implemented')
    low_latency_clean_mask_buffer = missing('deep_ep.Buffer.low_latency_clean_mask_buffer',
                                            'rank masking (enable_shrink) is not implemented')


class _LLHandle(tuple):
    """Upstream's low-latency handle (src_info, layout_range, T, hidden, num_experts), carrying the
    library's handle as well."""


from .elastic import ElasticBuffer, EPHandle  # noqa: E402  (V2; uses EventOverlap above)
