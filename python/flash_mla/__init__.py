"""flash_mla (deepseek-ai/FlashMLA) on CPU. libtilestack has the kernels
(include/tilestack/flash_mla.h); the Python bindings come in a later change, so each name
raises NotImplementedError naming the C function behind it (docs/python.md)."""
from _tilestack_py import missing

_LATER = 'the C function {} exists; its Python binding is not written yet'
get_mla_metadata = missing('flash_mla.get_mla_metadata', _LATER.format('ts_get_mla_metadata'))
flash_mla_with_kvcache = missing('flash_mla.flash_mla_with_kvcache', _LATER.format('ts_flash_mla_with_kvcache'))
flash_mla_sparse_fwd = missing('flash_mla.flash_mla_sparse_fwd', _LATER.format('ts_flash_mla_sparse_fwd'))
