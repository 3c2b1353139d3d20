"""deep_gemm.mega (MegaMoE). tilestack has the C side (include/tilestack/mega_moe.h, over an
MPI communicator); the Python binding is not written yet, so every name raises
NotImplementedError naming the C function to bind."""
from _tilestack_py import missing

_LATER = 'the C function {} exists; its Python binding (an MPI communicator from mpi4py) is not written yet'


class SymmBuffer:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError('deep_gemm.mega.SymmBuffer is not available in tilestack: '
                                  + _LATER.format('ts_get_symm_buffer_for_mega_moe'))


SM90SymmBuffer = SymmBuffer
get_symm_buffer_for_mega_moe = missing('deep_gemm.get_symm_buffer_for_mega_moe',
                                       _LATER.format('ts_get_symm_buffer_for_mega_moe'))
get_symm_buffer_for_sm90_mega_moe = missing('deep_gemm.get_symm_buffer_for_sm90_mega_moe',
                                            _LATER.format('ts_get_symm_buffer_for_mega_moe'))
transform_weights_for_mega_moe = missing('deep_gemm.transform_weights_for_mega_moe',
                                         _LATER.format('ts_transform_weights_for_mega_moe'))
transform_weights_for_mega_moe_sm90 = missing('deep_gemm.transform_weights_for_mega_moe_sm90',
                                              _LATER.format('ts_transform_weights_for_mega_moe'))
fp8_fp4_mega_moe = missing('deep_gemm.fp8_fp4_mega_moe', _LATER.format('ts_fp8_fp4_mega_moe'))
fp8_mega_moe = missing('deep_gemm.fp8_mega_moe', _LATER.format('ts_fp8_fp4_mega_moe'))
fp4_fp4_mega_moe = missing('deep_gemm.fp4_fp4_mega_moe', _LATER.format('ts_fp8_fp4_mega_moe'))
bf16_mega_moe = missing('deep_gemm.bf16_mega_moe', _LATER.format('ts_bf16_mega_moe'))
