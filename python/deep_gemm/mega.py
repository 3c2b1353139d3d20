"""deep_gemm.mega (MegaMoE) on CPU over include/tilestack/mega_moe.h: EP dispatch, linear-1,
SwiGLU, linear-2 and EP combine in one collective call across MPI processes (shared memory
inside a node). The group is a torch.distributed group under mpirun or an mpi4py communicator
(as deep_ep.Buffer takes). The SM90 variants have no CPU counterpart and raise
NotImplementedError. Differences from upstream: docs/python.md (deep_gemm table)."""
import os

import torch

from _tilestack_py import C, missing, tensor_of
from _tilestack_py.comm import resolve_comm

__all__ = ['SymmBuffer', 'get_symm_buffer_for_mega_moe', 'transform_weights_for_mega_moe',
           'fp8_fp4_mega_moe', 'bf16_mega_moe']

_HAVE = hasattr(C, 'mega_buffer_new')
_NO_MPI = 'libtilestack was built without MPI, so it has no ts_*_mega_moe (install Open MPI and rebuild)'
_NO_SM90 = 'the SM90 Mega MoE (FP8 weights, its own buffer layout) has no C implementation in tilestack'

class SymmBuffer:
    """The Mega MoE buffer (upstream: a symmetric-memory allocation). `x`, `x_sf`, `topk_idx`,
    `topk_weights` are views of the library's buffer: fill their first num_tokens rows, then
    call fp8_fp4_mega_moe / bf16_mega_moe. `x_sf` is None for mma_type 'bf16xbf16'."""

    def __init__(self, group, num_experts, num_max_tokens_per_rank, num_topk, hidden,
                 intermediate_hidden, mma_type='fp8xfp4', activation='swiglu', comm=None):
        fn = 'deep_gemm.get_symm_buffer_for_mega_moe'
        self._cap = None
        self._owned_comm = None
        if not _HAVE:
            raise NotImplementedError(f'{fn} is not available in tilestack: {_NO_MPI}')
        comm, self._owned_comm, handle, group = resolve_comm(fn, group, comm)
        self.group, self.comm = group, comm
        timeout = float(os.environ.get('TS_EP_TIMEOUT_S', '0') or 0)
        try:
            self._cap = C.mega_buffer_new(handle, num_experts, num_max_tokens_per_rank, num_topk, hidden,
                                          intermediate_hidden, mma_type, activation, timeout)
        except BaseException:
            if self._owned_comm is not None:  # the subgroup communicator made for this buffer
                self._owned_comm.Free()
                self._owned_comm = None
            raise
        x, x_sf, idx, w, info = C.mega_buffer_views(self._cap)
        self.x, self.x_sf, self.topk_idx, self.topk_weights = tensor_of(x), tensor_of(x_sf), tensor_of(idx), tensor_of(w)
        (self.num_max_tokens_per_rank, self.num_experts, self.num_local_experts, self.hidden,
         self.intermediate_hidden, self.num_topk, self.rank, self.num_ranks) = info
        self.mma_type = mma_type

    def destroy(self):
        """Collective (every rank, same order). Drops this object's views first; refused with
        RuntimeError while other tensors made from them are still alive."""
        self.x = self.x_sf = self.topk_idx = self.topk_weights = None
        if self._cap is not None:
            C.mega_buffer_destroy(self._cap)
            self._cap = None
        if self._owned_comm is not None:
            self._owned_comm.Free()
            self._owned_comm = None

    def _buf(self, fn):
        if self._cap is None:
            raise RuntimeError(f'{fn}: the buffer was destroyed')
        return self._cap


def get_symm_buffer_for_mega_moe(group, num_experts, num_max_tokens_per_rank, num_topk, hidden,
                                 intermediate_hidden, use_fp8_dispatch=None, mma_type='fp8xfp4',
                                 activation='swiglu', *, comm=None):
    """Collective. num_max_tokens_per_rank is rounded up to 8 (the views have that many rows).
    `comm=` (an mpi4py communicator) may stand in for `group`, as deep_ep.Buffer's."""
    if use_fp8_dispatch is not None and use_fp8_dispatch != (mma_type.split('x')[0] == 'fp8'):
        raise C.ValueError("deep_gemm.get_symm_buffer_for_mega_moe: argument 'use_fp8_dispatch' "
                           f'contradicts mma_type {mma_type!r}')
    return SymmBuffer(group, num_experts, num_max_tokens_per_rank, num_topk, hidden,
                      intermediate_hidden, mma_type, activation, comm)


class MegaMoEWeights:
    """One half (`which` = 'l1' or 'l2') of transform_weights_for_mega_moe's result. Both halves
    share the library's pre-packed copy of both weights, so the inputs may be freed."""
    __slots__ = ('_cap', 'which', 'bf16')

    def __init__(self, cap, which, bf16):
        self._cap, self.which, self.bf16 = cap, which, bf16


def _weight_pair(fn, name, w):
    if isinstance(w, torch.Tensor):
        return w, None
    if isinstance(w, (tuple, list)) and len(w) == 2:
        return w[0], w[1]
    raise C.TypeError(f"{fn}: argument '{name}' must be a (weight, scale factor) pair or a bf16 tensor, "
                      f'got {type(w).__name__}')


def transform_weights_for_mega_moe(l1_weights, l2_weights):
    """l1 = ([E_local, 2I, H/2] int8 packed FP4, sf), l2 = ([E_local, H, I/2] int8, sf), sf f32
    [.., K/32] powers of two or packed ue8m0 int32 (transform_sf_into_required_layout); or bf16
    tensors [E_local, 2I, H] / [E_local, H, I]. Returns (l1', l2') for the mega MoE calls.
    Differs: gate/up rows are not interleaved (the CPU kernels need no interleave)."""
    fn = 'deep_gemm.transform_weights_for_mega_moe'
    if not _HAVE:
        raise NotImplementedError(f'{fn} is not available in tilestack: {_NO_MPI}')
    l1, l1_sf = _weight_pair(fn, 'l1_weights', l1_weights)
    l2, l2_sf = _weight_pair(fn, 'l2_weights', l2_weights)
    cap = C.mega_weights_new(l1, l1_sf, l2, l2_sf)
    bf16 = isinstance(l1, torch.Tensor) and l1.dtype == torch.bfloat16
    return MegaMoEWeights(cap, 'l1', bf16), MegaMoEWeights(cap, 'l2', bf16)


def _weights(fn, l1, l2):
    for name, w, which in (('l1_weights', l1, 'l1'), ('l2_weights', l2, 'l2')):
        if not isinstance(w, MegaMoEWeights) or w.which != which:
            raise C.TypeError(f"{fn}: argument '{name}' must be the {which} result of "
                              f'transform_weights_for_mega_moe, got {type(w).__name__}')
    if l1._cap is not l2._cap:
        raise C.ValueError(f"{fn}: arguments 'l1_weights' and 'l2_weights' come from different "
                           'transform_weights_for_mega_moe calls')
    return l1._cap


def _buffer(fn, sym_buffer):
    if not isinstance(sym_buffer, SymmBuffer):
        raise C.TypeError(f"{fn}: argument 'sym_buffer' must be a SymmBuffer, got {type(sym_buffer).__name__}")
    return sym_buffer._buf(fn)


def fp8_fp4_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                     recipe=(1, 1, 32), activation='swiglu', activation_clamp=None, fast_math=True):
    """Collective. y: bf16 [num_tokens, hidden] (num_tokens <= the buffer's rows) is written;
    stats: int32 [E_local] or None, += tokens each local expert received. Returns None.
    fast_math is accepted; the CPU computes one set of bits either way (expf, IEEE divide)."""
    fn = 'deep_gemm.fp8_fp4_mega_moe'
    w = _weights(fn, l1_weights, l2_weights)
    C.mega_moe(0, y, w, _buffer(fn, sym_buffer), cumulative_local_expert_recv_stats, recipe, activation,
               activation_clamp, fast_math)


def bf16_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                  activation='swiglu', activation_clamp=None, fast_math=True):
    """fp8_fp4_mega_moe with bf16 weights and activations (mma_type 'bf16xbf16')."""
    fn = 'deep_gemm.bf16_mega_moe'
    w = _weights(fn, l1_weights, l2_weights)
    C.mega_moe(1, y, w, _buffer(fn, sym_buffer), cumulative_local_expert_recv_stats, None, activation,
               activation_clamp, fast_math)


def _unfused_mega_moe(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats=None,
                      activation_clamp=None, fast_math=True):
    """tilestack's unfused baseline (ts_mega_moe_unfused: EP dispatch + grouped GEMMs + SwiGLU
    cast + EP combine, from the library's public parts) on the same buffer inputs; upstream's
    test compares the fused call with such a baseline bit for bit. Not an upstream name."""
    fn = 'deep_gemm.mega._unfused_mega_moe'
    w = _weights(fn, l1_weights, l2_weights)
    C.mega_moe(2, y, w, _buffer(fn, sym_buffer), cumulative_local_expert_recv_stats, None, None,
               activation_clamp, fast_math)




class SM90SymmBuffer:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f'deep_gemm.mega.SM90SymmBuffer is not available in tilestack: {_NO_SM90}')


get_symm_buffer_for_sm90_mega_moe = missing('deep_gemm.get_symm_buffer_for_sm90_mega_moe', _NO_SM90)
transform_weights_for_mega_moe_sm90 = missing('deep_gemm.transform_weights_for_mega_moe_sm90', _NO_SM90)
fp8_mega_moe = missing('deep_gemm.fp8_mega_moe', _NO_SM90)
fp4_fp4_mega_moe = missing('deep_gemm.fp4_fp4_mega_moe', 'tilestack has FP8 x FP4 and BF16 Mega MoE only')
