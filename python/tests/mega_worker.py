"""One rank of the deep_gemm.mega checks; test_mega_moe.py runs it under `mpirun -np N`.
The problem is global (N_TOK tokens, E experts, seeded per token / per expert), split over the
ranks: rank r holds a contiguous share of the tokens and experts E/R * r .. It checks, for the
fp8xfp4 and bf16xbf16 buffers:
  - the fused result against the unfused computation written here in torch (calc_diff, as
    upstream's test), and bit for bit against tilestack's unfused baseline (ts_mega_moe_unfused);
  - the receive stats against the counts of the all-gathered routing;
  - the views: zero-copy (stable data pointers into one library allocation, fixed shapes);
  - argument errors (exception class, the argument named; y untouched);
and writes its rows of y to OUT_DIR/<mma>_<np>_<rank>.pt so the test compares rank counts bit
for bit. Prints MEGA_OK at the end; a failure aborts the job.

Usage: mega_worker.py OUT_DIR [--group]  (--group: a torch.distributed gloo group)."""
import os
import sys
import traceback

import torch
from mpi4py import MPI

import deep_gemm
from _tilestack_py import C
from deep_gemm.testing import calc_diff
from deep_gemm.utils import cast_back_from_fp4, per_token_cast_to_fp4, per_token_cast_to_fp8

comm = MPI.COMM_WORLD
rank, R = comm.Get_rank(), comm.Get_size()
N_TOK, E, K, H, I = 16, 4, 2, 256, 128
# the buffer's tokens per rank: each rank's share of the tokens less 3 is requested, which the
# buffer rounds up to a multiple of 8 (16 at R = 1, 8 at R = 2 and 4)
T = -(-(N_TOK // R - 3) // 8) * 8
CLAMP = 6.0


def tokens():
    """Every global token's input and routing, the same whatever R (seeded per token)."""
    xs, idx, w = [], [], []
    for t in range(N_TOK):
        g = torch.Generator().manual_seed(1000 + t)
        xs.append(torch.randn(H, generator=g).to(torch.bfloat16))
        perm = torch.randperm(E, generator=g)[:K]
        if t % 5 == 3:
            perm[1] = -1  # a masked slot
        idx.append(perm)
        w.append(torch.rand(K, generator=g) + 0.25)
    return torch.stack(xs), torch.stack(idx).to(torch.int64), torch.stack(w).float()


def expert_weights(bf16):
    """Per expert: W1 [2I, H], W2 [H, I] (floats as the kernel sees them) and the operands."""
    out = []
    for e in range(E):
        g = torch.Generator().manual_seed(77 + e)
        w1 = torch.randn(2 * I, H, generator=g) * 0.1
        w2 = torch.randn(H, I, generator=g) * 0.1
        if bf16:
            w1, w2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
            out.append((w1.float(), w2.float(), w1, None, w2, None))
        else:
            q1, s1 = per_token_cast_to_fp4(w1, True, gran_k=32)
            q2, s2 = per_token_cast_to_fp4(w2, True, gran_k=32)
            out.append((cast_back_from_fp4(q1, s1, gran_k=32), cast_back_from_fp4(q2, s2, gran_k=32),
                        q1, s1, q2, s2))
    return out


def e4m3_requant(act):
    """act f32 [.., I] -> e4m3 with one power-of-two scale per 32 values, dequantised."""
    a = act.view(*act.shape[:-1], -1, 32)
    amax = a.abs().amax(-1, keepdim=True).clamp(min=1e-30)  # all-zero blocks quantise to zero anyway
    s = torch.exp2(torch.ceil(torch.log2(amax * torch.tensor(1 / 448, dtype=torch.float32))))
    q = (a / s).to(torch.float8_e4m3fn)
    return (q.float() * s).view_as(act)


def reference(x_deq, idx, w, experts, bf16):
    """The unfused Mega MoE math of docs/mega_moe.md in torch (f64 dot products)."""
    y = torch.zeros(x_deq.shape[0], H)
    for t in range(x_deq.shape[0]):
        acc = torch.zeros(H, dtype=torch.float32)
        for k in range(K):
            e = int(idx[t, k])
            if e < 0:
                continue
            w1, w2 = experts[e][0], experts[e][1]
            h = (x_deq[t].double() @ w1.double().t()).to(torch.bfloat16).float()
            gate, up = h[:I].clamp(max=CLAMP), h[I:].clamp(-CLAMP, CLAMP)
            act = gate * torch.sigmoid(gate) * up * w[t, k]
            a = act.to(torch.bfloat16).float() if bf16 else e4m3_requant(act)
            acc += (a.double() @ w2.double().t()).to(torch.bfloat16).float()
        y[t] = acc
    return y.to(torch.bfloat16)


def make_group():
    if '--group' not in sys.argv:
        return comm
    import torch.distributed as dist
    port = os.environ['TS_EP_TEST_PORT']
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=R)
    return dist.group.WORLD


def check_views(buf, bf16):
    assert buf.x.shape == (T, H) and buf.x.dtype == (torch.bfloat16 if bf16 else torch.float8_e4m3fn)
    assert (buf.x_sf is None) == bf16
    if not bf16:
        assert buf.x_sf.shape == (T, H // 128) and buf.x_sf.dtype == torch.int32
    assert buf.topk_idx.shape == (T, K) and buf.topk_idx.dtype == torch.int64
    assert buf.topk_weights.shape == (T, K) and buf.topk_weights.dtype == torch.float32
    # Zero-copy: a second look at the library's views lands on the same addresses, and all four
    # lie inside one allocation of the size the views need (not torch copies).
    again = C.mega_buffer_views(buf._cap)
    views = [v for v in (buf.x, buf.x_sf, buf.topk_idx, buf.topk_weights) if v is not None]
    for v, d in zip((buf.x, buf.x_sf, buf.topk_idx, buf.topk_weights), again[:4]):
        if v is not None:
            assert torch.frombuffer(d[0], dtype=torch.uint8).data_ptr() == v.data_ptr()
    lo = min(v.data_ptr() for v in views)
    hi = max(v.data_ptr() + v.numel() * v.element_size() for v in views)
    assert hi - lo < 64 * 1024 * 1024
    del again


def run_case(group, bf16, out_dir):
    mma = 'bf16xbf16' if bf16 else 'fp8xfp4'
    El = E // R
    x_all, idx_all, w_all = tokens()
    share = N_TOK // R
    lo, hi = rank * share, (rank + 1) * share
    n = hi - lo
    buf = deep_gemm.get_symm_buffer_for_mega_moe(group, E, share - 3, K, H, I, mma_type=mma)
    assert buf.num_max_tokens_per_rank == T and buf.num_ranks == R and buf.rank == rank  # rounded up to 8
    check_views(buf, bf16)

    experts = expert_weights(bf16)
    mine = experts[rank * El:(rank + 1) * El]
    if bf16:
        l1 = torch.stack([m[2] for m in mine])
        l2 = torch.stack([m[4] for m in mine])
        tl1, tl2 = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    else:
        l1 = (torch.stack([m[2] for m in mine]), torch.stack([m[3] for m in mine]))
        l2 = (torch.stack([m[4] for m in mine]), torch.stack([m[5] for m in mine]))
        tl1, tl2 = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    del l1, l2  # the transformed weights are the library's own copy

    x = x_all[lo:hi]
    if bf16:
        buf.x[:n] = x
        x_deq = x.float()
    else:
        q, sf_packed = per_token_cast_to_fp8(x, True, gran_k=32, use_packed_ue8m0=True)
        _, sf = per_token_cast_to_fp8(x, True, gran_k=32)
        buf.x[:n], buf.x_sf[:n] = q, sf_packed
        x_deq = q.float() * sf.repeat_interleave(32, dim=1)
    buf.topk_idx[:n], buf.topk_weights[:n] = idx_all[lo:hi], w_all[lo:hi]

    call = deep_gemm.bf16_mega_moe if bf16 else deep_gemm.fp8_fp4_mega_moe
    y = torch.full((n, H), 7.0, dtype=torch.bfloat16)
    stats = torch.zeros(El, dtype=torch.int32)
    call(y, tl1, tl2, buf, stats, activation_clamp=CLAMP)

    ref = reference(x_deq, idx_all[lo:hi], w_all[lo:hi], experts, bf16)
    diff = calc_diff(y, ref)
    assert diff < 1e-4, f'{mma}: calc_diff {diff}'
    base = torch.full((n, H), 3.0, dtype=torch.bfloat16)
    deep_gemm.mega._unfused_mega_moe(base, tl1, tl2, buf, activation_clamp=CLAMP)
    assert torch.equal(y.view(torch.int16), base.view(torch.int16)), f'{mma}: fused != unfused baseline'
    want = torch.bincount(idx_all[idx_all >= 0].flatten(), minlength=E)[rank * El:(rank + 1) * El]
    assert torch.equal(stats, want.to(torch.int32)), (stats, want)
    torch.save(y, os.path.join(out_dir, f'{mma}_{R}_{rank}.pt'))
    if not bf16:
        # upstream's weight flow: scales through transform_sf_into_required_layout (packed
        # ue8m0 int32) give the same weights, so the same bits
        def packed(w):
            q, sf = w
            return q, deep_gemm.transform_sf_into_required_layout(sf, sf.shape[1], sf.shape[2] * 32, (1, 32), El)
        q1 = torch.stack([m[2] for m in mine]), torch.stack([m[3] for m in mine])
        q2 = torch.stack([m[4] for m in mine]), torch.stack([m[5] for m in mine])
        p1, p2 = deep_gemm.transform_weights_for_mega_moe(packed(q1), packed(q2))
        assert p1.which == 'l1'
        y2 = torch.empty_like(y)
        call(y2, p1, p2, buf, activation_clamp=CLAMP)
        assert torch.equal(y2.view(torch.int16), y.view(torch.int16)), 'packed-scale weights differ'

    check_errors(buf, tl1, tl2, n, bf16)
    # destroy is refused while a view made from the buffer is alive, then succeeds
    held = buf.topk_idx[:1]
    try:
        buf.destroy()
        raise AssertionError('destroy with a live view did not raise')
    except RuntimeError as e:
        assert 'still alive' in str(e), e
    del held
    buf.destroy()
    buf.destroy()  # a no-op


def check_errors(buf, tl1, tl2, n, bf16):
    """Every rank passes the same bad argument, so every rank gets the specific error."""
    call = deep_gemm.bf16_mega_moe if bf16 else deep_gemm.fp8_fp4_mega_moe
    y = torch.full((n, H), 7.0, dtype=torch.bfloat16)
    cases = [
        (lambda: call(y.float(), tl1, tl2, buf), TypeError, "'y'"),
        (lambda: call(None, tl1, tl2, buf), TypeError, "'y'"),
        (lambda: call(torch.empty(T + 1, H, dtype=torch.bfloat16), tl1, tl2, buf), ValueError, f'y: {T + 1} tokens'),
        (lambda: call(y, tl2, tl1, buf), TypeError, "'l1_weights'"),
        (lambda: call(y, tl1, tl2, object()), TypeError, "'sym_buffer'"),
        (lambda: call(y, tl1, tl2, buf, torch.zeros(E // R + 1, dtype=torch.int32)), ValueError,
         'cumulative_local_expert_recv_stats'),
        (lambda: call(y, tl1, tl2, buf, activation='gelu'), ValueError, 'activation'),
    ]
    for fn, exc, word in cases:
        try:
            fn()
        except exc as e:
            assert word in str(e), f'{type(e).__name__}: {e} (wanted {word})'
        else:
            raise AssertionError(f'no {exc.__name__} naming {word}')
        comm.Barrier()
    assert bool((y == 7.0).all()), 'an error wrote to y'


def main():
    out_dir = sys.argv[1]
    group = make_group()
    for bf16 in (False, True):
        run_case(group, bf16, out_dir)
    # Bad buffer arguments, the same on every rank: each rank gets the specific error.
    for args, exc, word in (((E, 8, K, 100, I), ValueError, 'hidden'), ((E, 8, 0, H, I), ValueError, 'num_topk'),
                            ((E, 8.0, K, H, I), TypeError, 'num_max_tokens_per_rank')):
        try:
            deep_gemm.get_symm_buffer_for_mega_moe(group, *args)
        except exc as e:
            assert word in str(e), f'{type(e).__name__}: {e} (wanted {word})'
        else:
            raise AssertionError(f'buffer {args}: no {exc.__name__}')
        comm.Barrier()
    # A view keeps the buffer alive after the SymmBuffer object is gone; the last one's death
    # destroys it (collectively: every rank drops it at the same point here).
    buf = deep_gemm.get_symm_buffer_for_mega_moe(group, E, 8, K, H, I)
    view, ptr = buf.topk_idx, buf.topk_idx.data_ptr()
    del buf
    view.fill_(-1)
    assert view.data_ptr() == ptr and bool((view == -1).all())
    del view
    comm.Barrier()
    print(f'MEGA_OK rank {rank}', flush=True)


if __name__ == '__main__':
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        comm.Abort(1)
