"""Binding overhead: time of the Python call minus the time its C call took (the extension
times the C function itself, GIL released: _tilestack.last_c_seconds()). One row per module
and shape; medians over many calls, small and large shapes interleaved call by call so that
load on a shared machine hits both alike.

    python python/bench/bench_overhead.py [--calls N]
"""
import argparse
import json
import platform
import time

import torch

import _tilestack as C
import deep_ep
import deep_gemm
import deep_select
import flash_mla
import tile_kernels
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8

LARGE = ('16x129280', 'n=2048', 'topk=2048', '4096x7168')  # shapes timed on every 20th round only


def ep_cases(g):
    """deep_ep rows on a 1-rank Buffer over mpi4py's COMM_SELF (one process, no mpirun): the
    binding's cost around the library's collective entry points at the smallest world."""
    try:
        from mpi4py import MPI
    except ImportError:
        print('deep_ep rows skipped: no mpi4py')
        return []
    t, hidden, experts, k = 4, 512, 16, 8
    buf = deep_ep.Buffer(comm=MPI.COMM_SELF, num_rdma_bytes=deep_ep.Buffer.get_low_latency_rdma_size_hint(
        t, hidden, 1, experts), low_latency_mode=True)
    idx = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(t)])
    x = torch.randn(t, hidden, generator=g).bfloat16()
    w = torch.rand(t, k, generator=g)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, t, experts, use_fp8=False)
    out = torch.empty(t, hidden, dtype=torch.bfloat16)
    return [
        ('deep_ep.Buffer.get_dispatch_layout', f'1 rank, {t} tokens, top-{k} of {experts}, allocating 3',
         lambda: buf.get_dispatch_layout(idx, experts)),
        ('deep_ep.Buffer.low_latency_combine', f'1 rank, {t}x{hidden} bf16, top-{k}, out given',
         lambda: buf.low_latency_combine(recv, idx, w, handle, out=out)),
    ]


def cases():
    g = torch.Generator().manual_seed(0)
    x_small = torch.randn(1, 256, generator=g)
    idx_small = torch.empty(1, 8, dtype=torch.int64)
    x_large = torch.randn(16, 129280, generator=g)
    a = torch.randn(1, 128, generator=g).bfloat16()
    b = torch.randn(128, 128, generator=g).bfloat16()
    a_q, b_q = per_token_cast_to_fp8(a, False), per_block_cast_to_fp8(b, False)
    d = torch.empty(1, 128, dtype=torch.bfloat16)
    al = torch.randn(256, 2048, generator=g).bfloat16()
    bl = torch.randn(2048, 2048, generator=g).bfloat16()
    al_q, bl_q = per_token_cast_to_fp8(al, False), per_block_cast_to_fp8(bl, False)
    dl = torch.empty(256, 2048, dtype=torch.bfloat16)
    q = torch.randn(4, 64, 128, generator=g).to(torch.float8_e4m3fn)
    kv = torch.randn(512, 128, generator=g).to(torch.float8_e4m3fn)
    kv_sf = torch.rand(512, generator=g) + 0.5
    w = torch.randn(4, 64, generator=g)
    ks = torch.zeros(4, dtype=torch.int32)
    ke = torch.full((4,), 512, dtype=torch.int32)
    fq = torch.randn(1, 64, 576, generator=g).bfloat16()
    fkv = torch.randn(256, 1, 576, generator=g).bfloat16()
    fidx = torch.arange(128, dtype=torch.int32).view(1, 1, 128)
    lq = torch.randn(4, 128, 576, generator=g).bfloat16()  # V3.2 sparse prefill: h_q 128, topk 2048
    lkv = torch.randn(4096, 1, 576, generator=g).bfloat16()
    lidx = torch.stack([torch.randperm(4096, generator=g)[:2048] for _ in range(4)]).int().view(4, 1, 2048)
    tx = torch.randn(1, 512, generator=g).bfloat16()
    tx_large = torch.randn(4096, 7168, generator=g).bfloat16()
    mhc_out = torch.empty(1, 4, 512, dtype=torch.bfloat16)
    return [
        ('deep_select.topk', '1x256 f32 k=8, output_idx given', lambda: deep_select.topk(
            x_small, 8, output_idx=idx_small, return_value=False)),
        ('deep_select.topk', '1x256 f32 k=8, allocating (values, idx)', lambda: deep_select.topk(x_small, 8)),
        ('deep_select.topk', '16x129280 f32 k=512 sorted', lambda: deep_select.topk(x_large, 512, sorted=True)),
        ('deep_gemm.fp8_gemm_nt', 'm=1 n=128 k=128', lambda: deep_gemm.fp8_gemm_nt(a_q, b_q, d)),
        ('deep_gemm.fp8_gemm_nt', 'm=256 n=2048 k=2048', lambda: deep_gemm.fp8_gemm_nt(al_q, bl_q, dl)),
        ('deep_gemm.bf16_gemm_nt', 'm=1 n=128 k=128', lambda: deep_gemm.bf16_gemm_nt(a, b, d)),
        ('deep_gemm.fp8_fp4_mqa_logits', 's=4 h=64 d=128 s_kv=512', lambda: deep_gemm.fp8_fp4_mqa_logits(
            (q, None), (kv, kv_sf), w, ks, ke)),
        ('flash_mla.flash_mla_sparse_fwd', 's_q=1 h_q=64 topk=128', lambda: flash_mla.flash_mla_sparse_fwd(
            fq, fkv, fidx, 576 ** -0.5)),
        ('flash_mla.flash_mla_sparse_fwd', 's_q=4 h_q=128 topk=2048 s_kv=4096', lambda: flash_mla.flash_mla_sparse_fwd(
            lq, lkv, lidx, 576 ** -0.5)),
        ('tile_kernels.quant.per_token_cast', '1x512 bf16 e4m3, 128/sf, allocating (out, sf)',
         lambda: tile_kernels.quant.per_token_cast(tx, 'e4m3', 128)),
        ('tile_kernels.quant.per_token_cast', '4096x7168 bf16 e4m3, 128/sf', lambda: tile_kernels.quant.per_token_cast(
            tx_large, 'e4m3', 128)),
        ('tile_kernels.mhc.expand_to_mhc', '1x512 bf16 hc=4, out given', lambda: tile_kernels.mhc.expand_to_mhc(
            tx, 4, out=mhc_out)),
    ] + ep_cases(g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--calls', type=int, default=2000)
    ap.add_argument('--json', default=None)
    args = ap.parse_args()
    rows = cases()
    samples = {i: ([], []) for i in range(len(rows))}
    for i, (_, _, f) in enumerate(rows):  # warm-up
        for _ in range(20):
            f()
    for it in range(args.calls):
        for i, (_, shape, f) in enumerate(rows):
            if any(m in shape for m in LARGE):
                if it % 20:  # large shapes: fewer calls, same interleaving
                    continue
            t0 = time.perf_counter()
            f()
            t = time.perf_counter() - t0
            samples[i][0].append(t)
            samples[i][1].append(C.last_c_seconds())
    cpu = platform.processor() or platform.machine()
    print(f'machine: {cpu}, {torch.get_num_threads()} torch threads, '
          f'{deep_gemm.get_num_sms()} tilestack threads')
    print(f"{'function':36} {'shape':48} {'python us':>10} {'C us':>10} {'overhead us':>12} "
          f"{'p10':>6} {'ratio':>7}")
    out = []
    for i, (name, shape, _) in enumerate(rows):
        py, c = samples[i]
        over = sorted(p - q for p, q in zip(py, c))
        med = lambda v: sorted(v)[len(v) // 2]
        row = dict(function=name, shape=shape, calls=len(py), python_us=med(py) * 1e6,
                   c_us=med(c) * 1e6, overhead_us=over[len(over) // 2] * 1e6,
                   overhead_p10_us=over[len(over) // 10] * 1e6,
                   ratio=med(py) / med(c))
        out.append(row)
        print(f"{name:36} {shape:48} {row['python_us']:10.2f} {row['c_us']:10.2f} "
              f"{row['overhead_us']:12.2f} {row['overhead_p10_us']:6.2f} {row['ratio']:7.3f}")
    if args.json:
        with open(args.json, 'w') as fh:
            for row in out:
                fh.write(json.dumps(row) + '\n')


if __name__ == '__main__':
    main()
