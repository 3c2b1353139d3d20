"""deep_gemm (deepseek-ai/DeepGEMM) on CPU, over libtilestack's GEMMs (include/tilestack/gemm.h).

Upstream's names, keywords, defaults and output-argument style (the GEMMs write `d` and return
None; quantised operands are (data, scale) pairs). Importing needs no CUDA. Functions without a
CPU implementation raise NotImplementedError naming what is missing (docs/python.md lists
them)."""
from _tilestack_py import C, missing, pair

# ---- runtime configuration: on a CPU num_sms is the thread count -------------------------
set_num_sms = C.set_num_sms
get_num_sms = C.get_num_sms
set_tc_util = C.set_tc_util
get_tc_util = C.get_tc_util
set_pdl = C.set_pdl
get_pdl = C.get_pdl
set_ignore_compile_dims = C.set_ignore_compile_dims


def set_block_size_multiple_of(m_multiple, n_multiple=None):
    """GPU tiling hint, stored only. An int sets both multiples, as upstream."""
    C.set_block_size_multiple_of(m_multiple, m_multiple if n_multiple is None else n_multiple)


def use_deterministic_algorithms(enable=True):
    """tilestack is always deterministic (bit-identical across thread counts, ISA paths and
    batch sizes), so this changes nothing."""
    del enable


_LAYOUT = {'nt': 0, 'nn': 1, 'tn': 2, 'tt': 3}


def _fp8_fp4_gemm(layout, default_dims):
    fn = f'deep_gemm.fp8_fp4_gemm_{layout}'
    index = _LAYOUT[layout]

    def gemm(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None,
             compiled_dims=default_dims, disable_ue8m0_cast=False):
        a_, sfa = pair(a, fn, 'a')
        b_, sfb = pair(b, fn, 'b')
        C.fp8_gemm(index, a_, sfa, b_, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims,
                   disable_ue8m0_cast)
    gemm.__name__ = gemm.__qualname__ = f'fp8_fp4_gemm_{layout}'
    gemm.__doc__ = (f'D = C + A·Bᵀ in the {layout.upper()} layout; a = (A, sfa), b = (B, sfb); '
                    'e4m3 or packed fp4 (int8) operands; writes d, returns None.')
    return gemm


def _bf16_gemm(layout, default_dims):
    index = _LAYOUT[layout]

    def gemm(a, b, d, c=None, compiled_dims=default_dims):
        C.bf16_gemm(index, a, b, d, c, compiled_dims)
    gemm.__name__ = gemm.__qualname__ = f'bf16_gemm_{layout}'
    gemm.__doc__ = f'D = C + A·Bᵀ in bf16 ({layout.upper()} layout, f32 accumulation); returns None.'
    return gemm


fp8_fp4_gemm_nt = _fp8_fp4_gemm('nt', 'nk')
fp8_fp4_gemm_nn = _fp8_fp4_gemm('nn', 'nk')
fp8_fp4_gemm_tn = _fp8_fp4_gemm('tn', 'mn')
fp8_fp4_gemm_tt = _fp8_fp4_gemm('tt', 'mn')
fp8_gemm_nt, fp8_gemm_nn, fp8_gemm_tn, fp8_gemm_tt = (
    fp8_fp4_gemm_nt, fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt)
fp4_gemm_nt = fp8_fp4_gemm_nt
bf16_gemm_nt = _bf16_gemm('nt', 'nk')
bf16_gemm_nn = _bf16_gemm('nn', 'nk')
bf16_gemm_tn = _bf16_gemm('tn', 'mn')
bf16_gemm_tt = _bf16_gemm('tt', 'mn')


def _m_grouped_contiguous(layout):
    fn = f'deep_gemm.m_grouped_fp8_fp4_gemm_{layout}_contiguous'

    def gemm(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
             compiled_dims='nk', disable_ue8m0_cast=False, use_psum_layout=False,
             ensure_zero_padding=True, expected_m_for_psum_layout=None):
        a_, sfa = pair(a, fn, 'a')
        b_, sfb = pair(b, fn, 'b')
        C.m_grouped_fp8_contiguous(_LAYOUT[layout], a_, sfa, b_, sfb, d, grouped_layout, recipe,
                                   recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
                                   use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    gemm.__name__ = gemm.__qualname__ = f'm_grouped_fp8_fp4_gemm_{layout}_contiguous'
    return gemm


m_grouped_fp8_fp4_gemm_nt_contiguous = _m_grouped_contiguous('nt')
m_grouped_fp8_fp4_gemm_nn_contiguous = _m_grouped_contiguous('nn')
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous
m_grouped_fp4_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None,
                                     recipe_b=None, compiled_dims='nk', disable_ue8m0_cast=False):
    fn = 'deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked'
    a_, sfa = pair(a, fn, 'a')
    b_, sfb = pair(b, fn, 'b')
    C.m_grouped_fp8_masked(a_, sfa, b_, sfb, d, masked_m, expected_m, recipe, recipe_a, recipe_b,
                           compiled_dims, disable_ue8m0_cast)


m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
m_grouped_fp4_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def _m_grouped_bf16_contiguous(layout):
    def gemm(a, b, d, grouped_layout, compiled_dims='nk', use_psum_layout=False,
             ensure_zero_padding=True, expected_m_for_psum_layout=None):
        C.m_grouped_bf16_contiguous(_LAYOUT[layout], a, b, d, grouped_layout, compiled_dims,
                                    use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    gemm.__name__ = gemm.__qualname__ = f'm_grouped_bf16_gemm_{layout}_contiguous'
    return gemm


m_grouped_bf16_gemm_nt_contiguous = _m_grouped_bf16_contiguous('nt')
m_grouped_bf16_gemm_nn_contiguous = _m_grouped_bf16_contiguous('nn')


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims='nk'):
    C.m_grouped_bf16_masked(a, b, d, masked_m, expected_m, compiled_dims)


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked


def _k_grouped_fp8(layout, index):
    fn = f'deep_gemm.k_grouped_fp8_gemm_{layout}_contiguous'

    def gemm(a, b, d, ks_cpu, grouped_layout=None, c=None, recipe=(1, 1, 128), compiled_dims='mn',
             use_psum_layout=False):
        a_, sfa = pair(a, fn, 'a')
        b_, sfb = pair(b, fn, 'b')
        C.k_grouped_fp8(index, a_, sfa, b_, sfb, d, ks_cpu, grouped_layout, c, recipe,
                        compiled_dims, use_psum_layout)
    gemm.__name__ = gemm.__qualname__ = f'k_grouped_fp8_gemm_{layout}_contiguous'
    return gemm


k_grouped_fp8_gemm_tn_contiguous = _k_grouped_fp8('tn', 0)
k_grouped_fp8_gemm_nt_contiguous = _k_grouped_fp8('nt', 1)


def k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_cpu, grouped_layout=None, c=None,
                                      compiled_dims='mn', use_psum_layout=False):
    C.k_grouped_bf16(a, b, d, ks_cpu, grouped_layout, c, compiled_dims, use_psum_layout)


def fp8_gemm_nt_skip_head_mid(a, b, d, head_splits, recipe=None, compiled_dims='nk',
                              disable_ue8m0_cast=False):
    fn = 'deep_gemm.fp8_gemm_nt_skip_head_mid'
    a_, sfa = pair(a, fn, 'a')
    b_, sfb = pair(b, fn, 'b')
    C.fp8_gemm_nt_skip_head_mid(a_, sfa, b_, sfb, d, tuple(head_splits), recipe, compiled_dims,
                                disable_ue8m0_cast)


def einsum(expr, a, b, d, c=None, use_cublaslt=False):
    C.einsum(expr, a, b, d, c, use_cublaslt)


def fp8_einsum(expr, a, b, d, c=None, recipe=(1, 128, 128)):
    fn = 'deep_gemm.fp8_einsum'
    a_, sfa = pair(a, fn, 'a')
    b_, sfb = pair(b, fn, 'b')
    C.fp8_einsum(expr, a_, sfa, b_, sfb, d, c, recipe)


def tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits=None):
    C.tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits)


# ---- upstream functions with no binding here yet ---------------------------------------------
_NO_CUBLAS = 'cuBLASLt is a CUDA library; use bf16_gemm_* / fp8_fp4_gemm_*'
cublaslt_gemm_nt = missing('deep_gemm.cublaslt_gemm_nt', _NO_CUBLAS)
cublaslt_gemm_nn = missing('deep_gemm.cublaslt_gemm_nn', _NO_CUBLAS)
cublaslt_gemm_tn = missing('deep_gemm.cublaslt_gemm_tn', _NO_CUBLAS)
cublaslt_gemm_tt = missing('deep_gemm.cublaslt_gemm_tt', _NO_CUBLAS)
cublaslt_nvfp4_gemm_nt = missing('deep_gemm.cublaslt_nvfp4_gemm_nt', _NO_CUBLAS)
batched_syrk = missing('deep_gemm.batched_syrk', 'no C implementation in tilestack')
batched_symm = missing('deep_gemm.batched_symm', 'no C implementation in tilestack')
k_grouped_fp4_gemm_nt_contiguous = missing('deep_gemm.k_grouped_fp4_gemm_nt_contiguous',
                                           'tilestack has no FP4 k-grouped GEMM')
bf16_mega_gate = missing('deep_gemm.bf16_mega_gate', 'no C implementation in tilestack')
get_bf16_mega_gate_config = missing('deep_gemm.get_bf16_mega_gate_config', 'no C implementation in tilestack')
mega_mhc = missing('deep_gemm.mega_mhc', 'no C implementation in tilestack')
from .attention import (  # noqa: E402
    fp8_fp4_mqa_logits, fp8_mqa_logits, get_paged_mqa_logits_metadata, fp8_fp4_paged_mqa_logits,
    fp8_paged_mqa_logits)
get_mqa_logits_metadata = missing('deep_gemm.get_mqa_logits_metadata', 'no C implementation in tilestack')
get_sparse_mqa_logits_metadata = missing('deep_gemm.get_sparse_mqa_logits_metadata',
                                         'no C implementation in tilestack')
get_paged_sparse_mqa_logits_metadata = missing('deep_gemm.get_paged_sparse_mqa_logits_metadata',
                                               'no C implementation in tilestack')
fp8_fp4_sparse_mqa_logits = missing('deep_gemm.fp8_fp4_sparse_mqa_logits', 'no C implementation in tilestack')
fp8_fp4_paged_sparse_mqa_logits = missing('deep_gemm.fp8_fp4_paged_sparse_mqa_logits',
                                          'no C implementation in tilestack')
from .sf_layout import transform_sf_into_required_layout  # noqa: E402,F401
get_block_m_for_mega_moe = missing('deep_gemm.get_block_m_for_mega_moe',
                                   'no C implementation in tilestack')

from . import mega  # noqa: E402
from .mega import (  # noqa: E402,F401
    SymmBuffer, SM90SymmBuffer, get_symm_buffer_for_mega_moe, get_symm_buffer_for_sm90_mega_moe,
    transform_weights_for_mega_moe, transform_weights_for_mega_moe_sm90, fp8_fp4_mega_moe,
    fp8_mega_moe, fp4_fp4_mega_moe, bf16_mega_moe)
from . import testing, utils  # noqa: E402,F401
from .utils import *  # noqa: E402,F401,F403

__version__ = '2.8.0'
