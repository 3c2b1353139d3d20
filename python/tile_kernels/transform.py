"""tile_kernels.transform: not bound yet (see tile_kernels/__init__.py)."""
from _tilestack_py import missing


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.transform.{name}',
                   'the tile-language kernel exists in libtilestack; its Python binding is not written yet')
