"""tile_kernels.modeling.mhc.ops: upstream's mHC op names (forward only; tile_kernels.mhc)."""
from tile_kernels.mhc import (expand_to_mhc, mhc_head_compute_mix, mhc_multilayer_recompute, mhc_post,  # noqa: F401
                    mhc_post_bwd, mhc_post_fwd, mhc_pre_apply_mix, mhc_pre_big_fuse, mhc_pre_norm_fn,
                    mhc_pre_split_mixes, sinkhorn_normalize)
