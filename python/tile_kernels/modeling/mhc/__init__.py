"""tile_kernels.modeling.mhc: the ops (forward only, see tile_kernels.mhc); upstream's functional
composition (mhc_pre, mhc_head, expand_from_embedding) is not ported."""
from _tilestack_py import missing

from . import ops  # noqa: F401

_WHAT = 'the autograd composition is not ported (its ops are, forward only, in tile_kernels.modeling.mhc.ops)'
mhc_pre = missing('tile_kernels.modeling.mhc.mhc_pre', _WHAT)
mhc_head = missing('tile_kernels.modeling.mhc.mhc_head', _WHAT)
expand_from_embedding = missing('tile_kernels.modeling.mhc.expand_from_embedding', _WHAT)
