"""tile_kernels (deepseek-ai/TileKernels) on CPU over libtilestack's TileKernels ports (written in
its tile language, include/tilestack/kernels.h after a build). quant, moe, transpose, transform
and mhc carry upstream's names; a function whose kernel or binding tilestack lacks raises
NotImplementedError naming what is missing (docs/python.md)."""
from . import quant, moe, mhc, transpose, transform, modeling  # noqa: F401
