"""deep_gemm.transform_sf_into_required_layout over ts_transform_sf_into_required_layout."""
import torch

from _tilestack_py import C


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=False,
                                      disable_ue8m0_cast=False, *, arch=100):
    """The scale factors in the layout the GEMMs of `arch` (100: packed ue8m0 int32, MN-major
    TMA-aligned; 90: f32 MN-major TMA-aligned) want, as upstream: same shape, strides, dtype
    and bytes. `recipe` is upstream's (gran_m, gran_n, gran_k), resolved with is_sfa, or an
    operand's (gran_mn, gran_k). Where upstream returns sf itself, so does this. `arch` is a
    tilestack keyword: upstream asks the GPU; a CPU has none to ask."""
    fn = 'deep_gemm.transform_sf_into_required_layout'
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise C.TypeError(f"{fn}: argument 'recipe' must be a tuple of 2 or 3 ints, got {recipe!r}")
    gran = (recipe[0 if is_sfa else 1], recipe[2]) if len(recipe) == 3 else tuple(recipe)
    if num_groups is not None and (not isinstance(num_groups, int) or num_groups <= 0):
        raise C.ValueError(f"{fn}: argument 'num_groups' must be a positive int or None, got {num_groups!r}")
    groups = 0 if num_groups is None else num_groups  # the C side's "no group dim"
    shape, strides, _, is_int = C.transform_sf(sf, mn, k, gran[0], gran[1], groups,
                                               disable_ue8m0_cast, arch, None)
    if sf.dtype == (torch.int32 if is_int else torch.float32) and \
            tuple(sf.shape) == shape and sf.stride() == strides:
        C.transform_sf(sf, mn, k, gran[0], gran[1], groups, disable_ue8m0_cast, arch, sf)
        return sf
    out = torch.empty_strided(shape, strides, dtype=torch.int32 if is_int else torch.float32)
    C.transform_sf(sf, mn, k, gran[0], gran[1], groups, disable_ue8m0_cast, arch, out)
    return out
