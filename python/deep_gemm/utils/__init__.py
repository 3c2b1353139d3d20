"""deep_gemm.utils: the casts and layout helpers upstream's tests and callers use."""
from .math import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
