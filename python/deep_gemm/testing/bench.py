"""bench: wall-clock timing of a CPU function (upstream times CUDA events; there is no
kernel profiler to ask here, so bench_kineto is missing)."""
import time

from _tilestack_py import missing

__all__ = ['bench', 'bench_kineto']


def bench(fn, num_warmups=5, num_tests=10, high_precision=False):
    """Median seconds per call over num_tests calls after num_warmups (upstream returns the
    mean of CUDA-event times; the median is robust on a shared CPU)."""
    del high_precision
    for _ in range(num_warmups):
        fn()
    times = []
    for _ in range(num_tests):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


bench_kineto = missing('deep_gemm.testing.bench_kineto',
                       'it reads CUDA kernel times from the torch profiler; use bench')
