"""deep_ep.Buffer across processes: ep_worker.py under `mpirun -np 2` and `-np 4` (mpi4py
communicator, and a torch.distributed gloo group mapped to MPI), plus the MPI-free parts in
this process. Skipped with a message when mpirun, mpi4py or the EP module is missing, except
under CI (CI=true) or TS_REQUIRE_PYTHON=1, where that fails as the rest of the check does. A
worker failure aborts its job; a hang is cut by the timeout (the buffers' own deadline is
TS_EP_TIMEOUT_S=20 s), so the test fails and never waits forever."""
import os

import pytest

import deep_ep
from _tilestack_py import C
from mpirun_helper import mpirun, need_mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ep_worker.py')


def _need_mpi():
    need_mpi('deep_ep')


def _mpirun(np_, *args):
    mpirun(WORKER, 'EP_OK', np_, *args)


@pytest.mark.parametrize('np_', [2, 4])
def test_buffer_mpi4py_comm(np_):
    _need_mpi()
    _mpirun(np_)


@pytest.mark.parametrize('np_', [2, 4])
def test_buffer_torch_group(np_):
    _need_mpi()
    _mpirun(np_, '--group')


def test_buffer_internode_path():
    # every pair of ranks its own node: the MPI-message path under the same Python checks
    _need_mpi()
    old = os.environ.get('TS_EP_RANKS_PER_NODE')
    os.environ['TS_EP_RANKS_PER_NODE'] = '2'
    try:
        _mpirun(4)
    finally:
        if old is None:
            del os.environ['TS_EP_RANKS_PER_NODE']
        else:
            os.environ['TS_EP_RANKS_PER_NODE'] = old


# ---- in this process (no MPI) ----

def test_configs_and_hints():
    if not getattr(C, 'have_ep', 0):
        pytest.skip('libtilestack was built without MPI (no EP module)')
    for r in (1, 2, 3, 8, 24):
        d, c = deep_ep.Buffer.get_dispatch_config(r), deep_ep.Buffer.get_combine_config(r)
        assert isinstance(d, deep_ep.Config) and isinstance(c, deep_ep.Config)
        assert d.num_max_nvl_chunked_send_tokens >= 1 and c.num_max_nvl_chunked_recv_tokens >= 1
    ll = deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 256)
    assert ll % (2 << 20) == 0 and ll > 128 * 256 * 7168 * 2  # dominated by E x T x hidden rows
    nb = deep_ep.Buffer.get_buffer_size_hint(8, 4096, 7168, 8, 56, True)
    assert nb % (2 << 20) == 0 and nb > 8 * 4096 * 7168
    with pytest.raises(ValueError):
        deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 255)  # E % R != 0
    with pytest.raises(NotImplementedError, match='not available in tilestack'):
        deep_ep.Config(20, 6, 256).get_nvl_buffer_size_hint(7168 * 2, 8)
    with pytest.raises(AssertionError):
        deep_ep.Buffer.set_num_sms(3)
    assert deep_ep.topk_idx_t is __import__('torch').int64


def test_buffer_argument_errors():
    if not getattr(C, 'have_ep', 0):
        with pytest.raises(NotImplementedError, match='without MPI'):
            deep_ep.Buffer(None, 0, 0, comm=object())
        return
    with pytest.raises(ValueError, match="'group' or 'comm'"):
        deep_ep.Buffer(None, 1 << 20, 0)
    with pytest.raises(TypeError, match='num_nvl_bytes'):
        deep_ep.Buffer(None, 1.5, 0, comm=object())
    with pytest.raises(NotImplementedError, match='enable_shrink'):
        deep_ep.Buffer(None, 0, 0, enable_shrink=True)
