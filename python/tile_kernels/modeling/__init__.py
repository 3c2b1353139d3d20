"""tile_kernels.modeling: upstream's autograd layers; only modeling.mhc.ops' forward ops exist here."""
from . import mhc  # noqa: F401
