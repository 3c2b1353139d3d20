"""tile_kernels (deepseek-ai/TileKernels) on CPU. libtilestack has these kernels, written in its
tile language (include/tilestack/kernels.h after a build); the Python bindings come in a later
change, so the submodules exist and each function raises NotImplementedError naming what is
missing (docs/python.md)."""
from . import quant, moe, mhc, transpose, transform  # noqa: F401
