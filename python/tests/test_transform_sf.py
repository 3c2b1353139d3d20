"""deep_gemm.transform_sf_into_required_layout against torch references of upstream's layouts:
packed ue8m0 MN-major TMA-aligned int32 (SM100) and f32 MN-major TMA-aligned (SM90 /
disable_ue8m0_cast), bytes and strides equal; sf returned itself where upstream does; argument
errors."""
import pytest
import torch

import deep_gemm
from _tilestack_py import C

G = torch.Generator().manual_seed(5)


def pow2_sf(*shape):
    return torch.exp2(torch.randint(-20, 20, shape, generator=G).float())


def align4(x):
    return (x + 3) // 4 * 4


def ref_packed(sf, mn, gran_mn):
    """[.., mn/gran_mn, sfk] f32 -> [.., mn, ceil(sfk/4)] int32, byte j of word w = exponent of
    sf[.., i // gran_mn, 4w+j], MN-major with the MN stride padded to a multiple of 4."""
    batched = sf.dim() == 3
    s = sf if batched else sf[None]
    g, _, sfk = s.shape
    rows = s[:, torch.arange(mn) // gran_mn, :]
    e = (rows.contiguous().view(torch.int32) >> 23) & 0xFF
    w = (sfk + 3) // 4
    e = torch.nn.functional.pad(e, (0, 4 * w - sfk))
    words = e[..., 0::4] | (e[..., 1::4] << 8) | (e[..., 2::4] << 16) | (e[..., 3::4] << 24)
    out = torch.empty_strided((g, mn, w), (align4(mn) * w, 1, align4(mn)), dtype=torch.int32)
    out.copy_(words)
    return out if batched else out[0]


def ref_f32_mn_major(sf):
    batched = sf.dim() == 3
    s = sf if batched else sf[None]
    g, mn, sfk = s.shape
    out = torch.empty_strided((g, mn, sfk), (align4(mn) * sfk, 1, align4(mn)), dtype=torch.float32)
    out.copy_(s)
    return out if batched else out[0]


def same_layout_and_bytes(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a,
                       b.view(torch.int32) if b.dtype == torch.float32 else b)


@pytest.mark.parametrize('mn,k,groups', [(5, 300, None), (128, 512, None), (7, 1000, 3)])
def test_sm100_sfa_packs_ue8m0(mn, k, groups):
    shape = (mn, (k + 127) // 128) if groups is None else (groups, mn, (k + 127) // 128)
    sf = pow2_sf(*shape)
    out = deep_gemm.transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), groups, is_sfa=True)
    same_layout_and_bytes(out, ref_packed(sf, mn, 1))


def test_sm100_sfb_128x128_broadcasts_rows():
    mn, k = 300, 640
    sf = pow2_sf((mn + 127) // 128, k // 128)
    out = deep_gemm.transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), is_sfa=False)
    same_layout_and_bytes(out, ref_packed(sf, mn, 128))
    # a 2-tuple recipe is the operand's own (gran_mn, gran_k)
    same_layout_and_bytes(deep_gemm.transform_sf_into_required_layout(sf, mn, k, (128, 128)), out)


def test_sm100_gran_k_32():
    mn, k = 9, 96
    sf = pow2_sf(mn, 3)
    out = deep_gemm.transform_sf_into_required_layout(sf, mn, k, (1, 32))
    same_layout_and_bytes(out, ref_packed(sf, mn, 1))


@pytest.mark.parametrize('arch,disable', [(90, False), (100, True)])
def test_f32_mn_major_tma_aligned(arch, disable):
    mn, k = 5, 300
    sf = torch.randn(2, mn, 3, generator=G)  # any f32: no ue8m0 cast here
    out = deep_gemm.transform_sf_into_required_layout(sf, mn, k, (1, 128), 2, disable_ue8m0_cast=disable,
                                                      arch=arch)
    same_layout_and_bytes(out, ref_f32_mn_major(sf))
    assert out.data_ptr() != sf.data_ptr()


def test_sf_returned_itself_where_upstream_does():
    sf = torch.randn(3, 4, generator=G)  # SM90 SFB 128x128: as-is
    assert deep_gemm.transform_sf_into_required_layout(sf, 300, 512, (1, 128, 128), arch=90) is sf
    packed = ref_packed(pow2_sf(5, 3), 5, 1)  # already packed int on SM100
    assert deep_gemm.transform_sf_into_required_layout(packed, 5, 512, (1, 128)) is packed


def test_argument_errors():
    f = deep_gemm.transform_sf_into_required_layout
    sf = pow2_sf(5, 3)
    with pytest.raises(ValueError, match='sf'):
        f(sf, 5, 600, (1, 128))  # 600 -> 5 K blocks, sf has 3
    with pytest.raises(ValueError, match='sf'):
        f(torch.full((5, 3), 3.0), 5, 300, (1, 128))  # not a power of two: no ue8m0 byte
    with pytest.raises(ValueError, match='sf'):
        f(sf, 5, 300, (1, 128), 2)  # num_groups given, sf is 2-D
    with pytest.raises(ValueError, match='num_groups'):
        f(sf, 5, 300, (1, 128), 0)
    with pytest.raises(ValueError, match='disable_ue8m0_cast'):
        f(pow2_sf(5, 10), 5, 300, (1, 32), disable_ue8m0_cast=True)
    with pytest.raises(TypeError, match="'sf'"):
        f(sf.to(torch.bfloat16), 5, 300, (1, 128))
    with pytest.raises(TypeError, match="'sf'"):
        f(None, 5, 300, (1, 128))
    with pytest.raises(TypeError, match="'recipe'"):
        f(sf, 5, 300, 128)
    with pytest.raises(TypeError, match="'mn'"):
        f(sf, 5.0, 300, (1, 128))
    assert issubclass(C.ValueError, RuntimeError)  # upstream's asserts surface as RuntimeError
