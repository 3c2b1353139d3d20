"""deep_ep (deepseek-ai/DeepEP) on CPU. libtilestack has expert-parallel dispatch / combine over
MPI (include/tilestack/ep.h); the Python Buffer (a torch.distributed group or an mpi4py
communicator mapped to its MPI_Comm) comes in a later change. Until then Buffer raises
NotImplementedError naming what is missing."""
import torch

from _tilestack_py import missing

topk_idx_t = torch.int64

_LATER = 'the C functions ts_ep_* exist; the Python Buffer over an MPI communicator is not written yet'


class Buffer:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f'deep_ep.Buffer is not available in tilestack: {_LATER}')


class Config:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f'deep_ep.Config is not available in tilestack: {_LATER}')


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


get_low_latency_rdma_size_hint = missing('deep_ep.Buffer.get_low_latency_rdma_size_hint', _LATER)
