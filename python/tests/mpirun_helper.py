"""Running a worker script under `mpirun --oversubscribe -np N` for the multi-rank tests
(test_deep_ep.py, test_mega_moe.py). Skipped with a message when mpirun, mpi4py or the EP module
is missing, except under CI (CI=true) or TS_REQUIRE_PYTHON=1, where that fails as the rest of
the check does. A worker failure aborts its job; a hang is cut by the timeout (the buffers' own
deadline is TS_EP_TIMEOUT_S=20 s), so the test fails and never waits forever."""
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from _tilestack_py import C

TIMEOUT_S = 300


def _required():
    return os.environ.get('CI') == 'true' or os.environ.get('TS_REQUIRE_PYTHON') == '1'


def _why_not():
    if not getattr(C, 'have_ep', 0):
        return 'libtilestack was built without MPI (no EP module)'
    if shutil.which('mpirun') is None:
        return 'mpirun not found (apt-get install openmpi-bin)'
    if importlib.util.find_spec('mpi4py') is None:
        return 'mpi4py not installed (pip install mpi4py)'
    return None


def need_mpi(what):
    why = _why_not()
    if why:
        if _required():
            pytest.fail(f'{what} multi-rank tests: {why} (required under CI)')
        pytest.skip(f'{what} multi-rank tests: {why}')


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def mpirun(worker, ok_marker, np_, *args):
    """Run `worker` on np_ ranks; every rank must print ok_marker and the job exit 0."""
    env = dict(os.environ, TS_EP_TIMEOUT_S=os.environ.get('TS_EP_TIMEOUT_S', '20'),
               TS_EP_TEST_PORT=str(_free_port()))
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    cmd = ['mpirun', '--oversubscribe', '-np', str(np_), sys.executable, worker, *args]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f'{" ".join(cmd)} did not finish in {TIMEOUT_S} s:\n{out[-4000:]}')
    oks = sum(line.startswith(ok_marker) for line in out.replace(ok_marker, '\n' + ok_marker).splitlines())
    assert p.returncode == 0 and oks == np_, f'{" ".join(cmd)}: rc {p.returncode}, {oks} ranks ok:\n{out[-6000:]}'
