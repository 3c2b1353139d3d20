"""deep_gemm.mega across processes: mega_worker.py under `mpirun -np 1`, `-np 2` and `-np 4` (mpi4py
communicator, and a torch.distributed gloo group mapped to MPI) checks the fused calls against
a torch reference and tilestack's unfused baseline; here the outputs are compared bit for bit
across rank counts, and the parts that need no MPI run in this process."""
import os

import pytest
import torch

import deep_gemm
from _tilestack_py import C
from mpirun_helper import mpirun, need_mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mega_worker.py')


@pytest.fixture(scope='module')
def outputs(tmp_path_factory):
    """y of every rank for each run, from one worker job per rank count."""
    need_mpi('deep_gemm.mega')
    d = tmp_path_factory.mktemp('mega')
    for np_ in (1, 2, 4):
        mpirun(WORKER, 'MEGA_OK', np_, str(d))
    return d


@pytest.mark.parametrize('mma', ['fp8xfp4', 'bf16xbf16'])
def test_bit_identical_across_rank_counts(outputs, mma):
    one = torch.load(outputs / f'{mma}_1_0.pt')
    for np_ in (2, 4):
        many = torch.cat([torch.load(outputs / f'{mma}_{np_}_{r}.pt') for r in range(np_)])
        assert one.shape == many.shape == (16, 256)
        assert torch.equal(one.view(torch.int16), many.view(torch.int16)), f'{np_} ranks'


@pytest.mark.parametrize('np_', [2, 4])
def test_torch_group(tmp_path, np_):
    need_mpi('deep_gemm.mega')
    mpirun(WORKER, 'MEGA_OK', np_, str(tmp_path), '--group')


# ---- in this process (no MPI communicator) ----

def test_sm90_variants_not_implemented():
    for call in (lambda: deep_gemm.get_symm_buffer_for_sm90_mega_moe(None, 8, 8, 2, 128, 128),
                 lambda: deep_gemm.transform_weights_for_mega_moe_sm90(None, None),
                 lambda: deep_gemm.fp8_mega_moe(None, None, None, None),
                 lambda: deep_gemm.mega.SM90SymmBuffer(None)):
        with pytest.raises(NotImplementedError, match='not available in tilestack'):
            call()


def test_argument_errors_without_mpi():
    if not getattr(C, 'have_ep', 0):
        with pytest.raises(NotImplementedError, match='without MPI'):
            deep_gemm.transform_weights_for_mega_moe(None, None)
        return
    with pytest.raises(ValueError, match="'group' or 'comm'"):
        deep_gemm.get_symm_buffer_for_mega_moe(None, 8, 8, 2, 128, 128)
    with pytest.raises(ValueError, match='use_fp8_dispatch'):
        deep_gemm.get_symm_buffer_for_mega_moe(None, 8, 8, 2, 128, 128, use_fp8_dispatch=False)
    w1 = torch.zeros(2, 256, 64, dtype=torch.int8)
    s1 = torch.ones(2, 256, 4)
    w2 = torch.zeros(2, 128, 64, dtype=torch.int8)
    s2 = torch.ones(2, 128, 4)
    with pytest.raises(TypeError, match='l1 must be'):  # the C side's name of l1_weights[0]
        deep_gemm.transform_weights_for_mega_moe(w1.float(), (w2, s2))
    with pytest.raises(TypeError, match='l2_weights'):
        deep_gemm.transform_weights_for_mega_moe((w1, s1), 'w2')
    with pytest.raises(TypeError, match="'l1_weight_sf'"):
        deep_gemm.transform_weights_for_mega_moe((w1, 's1'), (w2, s2))
    with pytest.raises(ValueError):
        deep_gemm.transform_weights_for_mega_moe((w1, s1), (w2[:1], s2[:1]))  # expert counts differ
    l1, l2 = deep_gemm.transform_weights_for_mega_moe((w1, s1), (w2, s2))
    assert (l1.which, l2.which) == ('l1', 'l2') and l1._cap is l2._cap
    y = torch.empty(1, 128, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="'sym_buffer'"):
        deep_gemm.fp8_fp4_mega_moe(y, l1, l2, None)
    other = deep_gemm.transform_weights_for_mega_moe((w1, s1), (w2, s2))
    with pytest.raises(ValueError, match='different'):
        deep_gemm.fp8_fp4_mega_moe(y, l1, other[1], None)
