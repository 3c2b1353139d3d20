"""The five upstream module names import on a machine without CUDA, and names without a CPU
implementation fail loudly."""
import os
import subprocess
import sys

import pytest

MODULES = ['deep_gemm', 'deep_ep', 'flash_mla', 'deep_select', 'tile_kernels']


def test_import_without_cuda():
    # A fresh interpreter that can see no GPU and has no CUDA home: upstream's deep_gemm
    # asserts one at import; ours must not need it.
    env = {k: v for k, v in os.environ.items() if k not in ('CUDA_HOME', 'CUDA_PATH')}
    env['CUDA_VISIBLE_DEVICES'] = ''
    code = ('import torch, deep_gemm, deep_ep, flash_mla, deep_select, tile_kernels\n'
            'assert not torch.cuda.is_available()\n'
            'print(deep_gemm.get_num_sms() >= 1, deep_select.get_stride_requirement())\n')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ['True', '(1,', '1)']


@pytest.mark.parametrize('call', [
    lambda: __import__('deep_ep').Buffer(None, 0, 0, enable_shrink=True),
    lambda: __import__('deep_gemm').get_symm_buffer_for_sm90_mega_moe(None),
    lambda: __import__('deep_gemm').transform_weights_for_mega_moe_sm90(None, None),
    lambda: __import__('deep_gemm').cublaslt_gemm_nt(None, None, None),
    lambda: __import__('tile_kernels').quant.swiglu_backward_and_per_token_cast(None),
])
def test_missing_functions_raise_not_implemented(call):
    with pytest.raises(NotImplementedError, match='not available in tilestack'):
        call()


def test_event_overlap_is_completed():
    import deep_ep
    ev = deep_ep.EventOverlap()
    ev.current_stream_wait()
    with ev:
        pass
    import torch
    assert deep_ep.topk_idx_t == torch.int64
