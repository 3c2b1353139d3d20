"""tile_kernels.transform on CPU: apply_rotary over ts_apply_rotary (libtilestack's rope.tile,
upstream's fma forms, so exact; docs/kernels.md "RoPE")."""
import torch

from _tilestack_py import C, missing
from ._common import call, integer, tensor

_K = {torch.bfloat16: 'apply_rotary', torch.float32: 'apply_rotary_f32'}


def apply_rotary(query, cos_sin_cache, key=None, positions=None, interleaved: bool = False,
                 conjugate: bool = False, seqlen_offset: int = 0):
    """Rotary embedding applied in place to query (and key): [T, heads, D] or [B, S, heads, D],
    cos_sin_cache f32 [rows, D] (cos in the first half, sin in the second), positions int32 /
    int64 [T] or [B, S] (row = seqlen_offset + position, else seqlen_offset + token). Returns None."""
    fn = 'tile_kernels.transform.apply_rotary'
    tensor(query, fn, 'query', tuple(_K))
    tensor(cos_sin_cache, fn, 'cos_sin_cache', (torch.float32,), 2)
    integer(seqlen_offset, fn, 'seqlen_offset')
    if query.dim() not in (3, 4):
        raise C.ValueError(f"{fn}: argument 'query' must be 3-D or 4-D, got {tuple(query.shape)}")
    rot = cos_sin_cache.shape[1]
    xs = [('query', query)]
    if key is not None:
        tensor(key, fn, 'key', (query.dtype,), query.dim())
        xs.append(('key', key))
    for name, x in xs:
        if x.shape[-1] != rot:
            raise C.ValueError(f"{fn}: argument '{name}' last dimension {x.shape[-1]} != rot_dim {rot}")
    lead = tuple(query.shape[:-2])
    if positions is not None:
        tensor(positions, fn, 'positions', (torch.int32, torch.int64))
        if tuple(positions.shape) != lead:
            raise C.ValueError(f"{fn}: argument 'positions' must have shape {lead}, got {tuple(positions.shape)}")
        pos = positions.to(torch.int32) if positions.dtype == torch.int64 else positions
        if positions.dtype == torch.int64 and not torch.equal(pos.to(torch.int64), positions):
            raise C.ValueError(f"{fn}: argument 'positions' has entries outside int32")
    else:
        pos = torch.zeros(1, dtype=torch.int32)
    for name, x in xs:
        if x.numel() == 0:
            continue
        batches = [(x, pos)] if x.dim() == 3 else [(x[b], pos[b] if positions is not None else pos)
                                                  for b in range(x.shape[0])]
        for xb, pb in batches:
            call(_K[x.dtype], fn, (name, 'cos_sin_cache', 'positions'), xb, cos_sin_cache, pb, seqlen_offset,
                 positions is not None, interleaved, conjugate)


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.transform.{name}', 'not in tilestack')
