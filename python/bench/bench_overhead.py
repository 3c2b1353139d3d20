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
import deep_gemm
import deep_select
import flash_mla
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8


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
    ]


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
            if 'n=2048' in shape or '129280' in shape:
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
    print(f"{'function':28} {'shape':40} {'python us':>10} {'C us':>10} {'overhead us':>12} "
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
        print(f"{name:28} {shape:40} {row['python_us']:10.2f} {row['c_us']:10.2f} "
              f"{row['overhead_us']:12.2f} {row['overhead_p10_us']:6.2f} {row['ratio']:7.3f}")
    if args.json:
        with open(args.json, 'w') as fh:
            for row in out:
                fh.write(json.dumps(row) + '\n')


if __name__ == '__main__':
    main()
