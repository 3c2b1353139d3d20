"""deep_gemm.testing: the metric and timing helpers upstream's tests use."""
from .numeric import *  # noqa: F401,F403
from .bench import *  # noqa: F401,F403
