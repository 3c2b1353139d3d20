"""deep_ep.ElasticBuffer / EPHandle (DeepEP V2) across processes: ep_elastic_worker.py under
`mpirun -np 2` and `-np 4` (mpi4py communicator), at 4 ranks with two ranks per node (the
MPI-message path) and at 2 ranks with a torch.distributed gloo group; plus the MPI-free parts
in this process. Skipped / required as test_deep_ep.py (mpirun_helper)."""
import os

import pytest

import deep_ep
from _tilestack_py import C
from mpirun_helper import mpirun, need_mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ep_elastic_worker.py')


@pytest.mark.parametrize('np_', [2, 4])
def test_elastic_mpi4py_comm(np_):
    need_mpi('deep_ep.ElasticBuffer')
    mpirun(WORKER, 'ELASTIC_OK', np_)


def test_elastic_torch_group():
    need_mpi('deep_ep.ElasticBuffer')
    mpirun(WORKER, 'ELASTIC_OK', 2, '--group')


def test_elastic_internode_path(monkeypatch):
    need_mpi('deep_ep.ElasticBuffer')
    monkeypatch.setenv('TS_EP_RANKS_PER_NODE', '2')
    mpirun(WORKER, 'ELASTIC_OK', 4)


# ---- in this process (no MPI) ----

def test_size_hint_and_stubs():
    if not getattr(C, 'have_ep', 0):
        pytest.skip('libtilestack was built without MPI (no EP module)')
    eb = deep_ep.ElasticBuffer
    h = eb.get_buffer_size_hint(8, 4096, 7168, 8)
    assert h % (2 << 20) == 0 and h > 8 * 4096 * 7168 * 2  # the worst case: every token to one rank
    assert eb.get_buffer_size_hint(8, 4096, 7168) >= h  # num_topk 0 sizes for top-32
    assert eb.get_buffer_size_hint(8, 4096, 7168, 8, use_fp8_dispatch=True) < h
    assert eb.get_buffer_size_hint(8, 4096, 7168, 8) == C.ep_elastic_size_hint(8, 4096, 7168, 8, False)
    with pytest.raises(ValueError, match='num_topk'):
        eb.get_buffer_size_hint(8, 4096, 7168, 2000)
    with pytest.raises(TypeError, match="'group'"):
        eb.get_buffer_size_hint('eight', 4096, 7168)
    with pytest.raises(TypeError, match="'hidden'"):
        eb.get_buffer_size_hint(8, 4096, 7168.0)
    for name, word in (('get_engram_storage_size_hint', 'Engram'), ('get_pp_buffer_size_hint', 'pipeline-parallel'),
                       ('get_agrs_num_max_session_bytes', 'AGRS'), ('get_agrs_buffer_size_hint', 'AGRS')):
        with pytest.raises(NotImplementedError, match=word):
            getattr(eb, name)(1, 2)
    assert isinstance(eb.capture(), deep_ep.EventOverlap)


def test_constructor_errors():
    # all raised before the communicator is read (mpi4py stays unimported in this process)
    if not getattr(C, 'have_ep', 0):
        with pytest.raises(NotImplementedError, match='without MPI'):
            deep_ep.ElasticBuffer(None, comm=object())
        return
    with pytest.raises(ValueError, match="'group' or 'comm'"):
        deep_ep.ElasticBuffer(None, 1 << 21)
    with pytest.raises(NotImplementedError, match='num_cpu_bytes.*Engram'):
        deep_ep.ElasticBuffer(None, 1 << 22, num_cpu_bytes=1 << 21, comm=object())
    with pytest.raises(TypeError, match="'num_topk'"):
        deep_ep.ElasticBuffer(None, num_max_tokens_per_rank=8, hidden=128, num_topk=2.5, comm=object())


def test_handle_without_library():
    h = deep_ep.EPHandle(False, 8, 1, 16, 0, None, 0, 0, [], None, None, None, None)
    assert h.dst_buffer_slot_idx is None and h.channel_linked_list is None
    with pytest.raises(TypeError, match='not returned by'):
        h.deterministic_sort(True, False, None, None, None, None, None)
