"""deep_gemm.utils.layout: the contiguous-layout alignment knobs (process-wide, as upstream)."""
from _tilestack_py import C

__all__ = ['get_mk_alignment_for_contiguous_layout', 'set_mk_alignment_for_contiguous_layout',
           'get_theoretical_mk_alignment_for_contiguous_layout',
           'get_m_alignment_for_contiguous_layout', 'get_k_alignment_for_contiguous_layout',
           'get_tma_aligned_size']

get_mk_alignment_for_contiguous_layout = C.get_mk_alignment
set_mk_alignment_for_contiguous_layout = C.set_mk_alignment
get_m_alignment_for_contiguous_layout = C.get_mk_alignment
get_k_alignment_for_contiguous_layout = C.get_mk_alignment


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None):
    """128 whatever expected_m: a CPU has no BLOCK_M to search (upstream SM90's answer)."""
    return C.get_theoretical_mk_alignment(expected_m)


def get_tma_aligned_size(x, element_size):
    """align(x, 16 / element_size), as upstream."""
    assert 16 % element_size == 0
    align = 16 // element_size
    return (x + align - 1) // align * align
