"""tile_kernels.transpose on CPU: transpose / batched_transpose over ts_batched_transpose
(bf16, f32, e4m3; raw bits copied). Outputs contiguous, as upstream. Any M, N (upstream: multiples
of 64)."""
import torch

from _tilestack_py import missing
from ._common import call, tensor

_K = {torch.bfloat16: 'batched_transpose', torch.float32: 'batched_transpose_f32',
      torch.float8_e4m3fn: 'batched_transpose_e4m3'}


def batched_transpose(x):
    """[B, M, N] -> [B, N, M]."""
    fn = 'tile_kernels.transpose.batched_transpose'
    tensor(x, fn, 'x', tuple(_K), 3)
    out = torch.empty((x.shape[0], x.shape[2], x.shape[1]), dtype=x.dtype, device=x.device)
    if out.numel():
        call(_K[x.dtype], fn, ('x', 'out'), x, out)
    return out


def transpose(x):
    """[M, N] -> [N, M]."""
    fn = 'tile_kernels.transpose.transpose'
    tensor(x, fn, 'x', tuple(_K), 2)
    out = torch.empty((x.shape[1], x.shape[0]), dtype=x.dtype, device=x.device)
    if out.numel():
        call(_K[x.dtype], fn, ('x', 'out'), x.unsqueeze(0), out.unsqueeze(0))
    return out


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.transpose.{name}', 'not in tilestack')
