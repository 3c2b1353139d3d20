"""One rank of the deep_ep.ElasticBuffer (DeepEP V2) checks; test_deep_ep_elastic.py runs it under
`mpirun -np N`. Every rank all-gathers every rank's inputs and builds, with plain torch loops,
what it must receive (normal and expanded layouts) and what combine must return, then checks
the library's outputs bit for bit. A failure prints the traceback and aborts the whole job.

Usage: ep_elastic_worker.py [--group]  (--group: a torch.distributed gloo group instead of comm=)."""
import os
import sys
import traceback

import torch
from mpi4py import MPI

import deep_ep
from _tilestack_py import C

comm = MPI.COMM_WORLD
rank, R = comm.Get_rank(), comm.Get_size()
TIMEOUT = float(os.environ.get('TS_EP_TIMEOUT_S', '20'))
GROUP = None


def bits(t):
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b, what):
    assert a.shape == b.shape, f'{what}: shape {tuple(a.shape)} != {tuple(b.shape)}'
    assert a.dtype == b.dtype, f'{what}: dtype {a.dtype} != {b.dtype}'
    assert torch.equal(bits(a), bits(b)), f'{what}: values differ'


def allgather(t):
    parts = comm.allgather((t.dtype, tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes()))
    return [torch.frombuffer(bytearray(b), dtype=torch.uint8).view(dt).reshape(sh) if b else torch.empty(sh, dtype=dt)
            for dt, sh, b in parts]


def expect_error(call, what, exc, word, bad_ranks):
    """`call` raises on every rank: a bad rank `exc` naming `word`, the others RuntimeError
    naming the lowest bad rank (tilestack's TS_ERR_PEER)."""
    try:
        call()
    except Exception as e:  # noqa: BLE001
        if rank in bad_ranks:
            assert isinstance(e, exc) and word in str(e), f'{what}: bad rank got {type(e).__name__}: {e}'
        else:
            assert type(e) is RuntimeError and str(min(bad_ranks)) in str(e), \
                f'{what}: peer got {type(e).__name__}: {e}'
        return
    raise AssertionError(f'{what} did not raise')


def make_buffer(**kw):
    kw.setdefault('num_cpu_timeout_secs', TIMEOUT)
    if GROUP is not None:
        return deep_ep.ElasticBuffer(GROUP, **kw)
    return deep_ep.ElasticBuffer(None, comm=comm, **kw)


def align(n, a):
    return -(-n // a) * a


class Ref:
    """What this rank receives, from every rank's inputs (all-gathered)."""

    def __init__(self, all_idx, el):
        self.el = el
        self.rows = []  # (source rank, source token) in receive order
        self.local = []  # per received row: K local ids or -1
        for s in range(R):
            for t in range(all_idx[s].shape[0]):
                ids = [int(e) - rank * el if int(e) >= 0 and int(e) // el == rank else -1 for e in all_idx[s][t]]
                if any(v >= 0 for v in ids):
                    self.rows.append((s, t))
                    self.local.append(ids)
        self.n = len(self.rows)
        self.counts = [sum(ids.count(e) for ids in self.local) for e in range(el)]
        self.psum_rank = [sum(1 for s, _ in self.rows if s <= r) for r in range(R)]

    def gather(self, per_rank, cols, dtype):
        if not self.rows:
            return torch.empty((0, *cols), dtype=dtype)
        return torch.stack([per_rank[s][t] for s, t in self.rows])

    def idx(self, dtype, K):
        return torch.tensor(self.local, dtype=dtype).reshape(-1, K)

    def weights(self, all_w, K):
        w = [[float(all_w[s][t][k]) if self.local[i][k] >= 0 else 0.0 for k in range(K)]
             for i, (s, t) in enumerate(self.rows)]
        return torch.tensor(w, dtype=torch.float32).reshape(-1, K)

    def expanded(self, A):
        """(source of each expanded row: (received row, k) or None for padding, starts, psum)."""
        slots, starts, psum = [], [], []
        for e in range(self.el):
            starts.append(len(slots))
            for i, ids in enumerate(self.local):
                for k, v in enumerate(ids):
                    if v == e:
                        slots.append((i, k))
            psum.append(len(slots))
            slots.extend([None] * (align(self.counts[e], A) - self.counts[e]))
        return slots, starts, psum


def gen_inputs(seed, n, hidden, E, K):
    """Routing with distinct experts per token and some -1; weights dyadic (k/4, k in 1..8) so
    the references' float64 sums are exact and their one rounding to f32 is fmaf's."""
    g = torch.Generator().manual_seed(seed)
    topk_idx = torch.topk(torch.rand(n, E, generator=g), K, dim=-1, sorted=False).indices.to(torch.int64)
    topk_idx[torch.rand(n, K, generator=g) < 0.15] = -1
    topk_w = torch.randint(1, 9, (n, K), generator=g).to(torch.float32) / 4
    x = torch.randn(n, hidden, generator=g).to(torch.bfloat16)
    return topk_idx, topk_w, x


def check_handle(h, ref, A, expand, n, K, topk_idx, E):
    el = ref.el
    assert isinstance(h, deep_ep.EPHandle)
    assert (h.do_expand, h.num_experts, h.expert_alignment, h.num_recv_tokens) == (expand, E, A, ref.n)
    same(h.topk_idx, topk_idx.to(torch.int64), 'handle.topk_idx')
    same(h.psum_num_recv_tokens_per_scaleup_rank, torch.tensor(ref.psum_rank, dtype=torch.int32),
         'psum_num_recv_tokens_per_scaleup_rank')
    aligned = [align(c, A) for c in ref.counts]
    assert h.num_recv_tokens_per_expert_list == aligned, f'{h.num_recv_tokens_per_expert_list} != {aligned}'
    same(h.num_unaligned_recv_tokens_per_expert, torch.tensor(ref.counts, dtype=torch.int32), 'unaligned counts')
    if expand:
        _, starts, psum = ref.expanded(A)
        same(h.psum_num_recv_tokens_per_expert, torch.tensor(psum, dtype=torch.int32), 'expanded psum per expert')
        assert h.num_expanded_tokens == sum(aligned)
        # upstream's identities: real count = psum[i] - align(psum[i-1]); next start = align(psum[i])
        for e in range(el):
            prev = align(int(h.psum_num_recv_tokens_per_expert[e - 1]), A) if e else 0
            assert prev == starts[e] and int(h.psum_num_recv_tokens_per_expert[e]) - prev == ref.counts[e]
    else:
        same(h.psum_num_recv_tokens_per_expert, torch.tensor(aligned, dtype=torch.int32).cumsum(0, dtype=torch.int32),
             'psum per expert')
        assert h.num_expanded_tokens == ref.n
    meta = h.recv_src_metadata
    assert meta.dtype == torch.int32 and tuple(meta.shape) == (ref.n, 2 + K)
    same(meta[:, :2], torch.tensor(ref.rows, dtype=torch.int32).reshape(-1, 2), 'recv_src_metadata[:, :2]')
    if expand:
        slots, _, _ = ref.expanded(A)
        want = torch.full((ref.n, K), -1, dtype=torch.int32)
        for s, src in enumerate(slots):
            if src is not None:
                want[src[0], src[1]] = s
        same(meta[:, 2:], want, 'recv_src_metadata expanded rows')
    else:
        assert bool((meta[:, 2:] == -1).all())


def main_checks():
    hidden, K, E = 256, 4, 4 * R
    el = E // R
    n = 24 + 5 * rank if rank != 1 else 0  # rank 1 sends nothing
    topk_idx, topk_w, x = gen_inputs(100 + rank, n, hidden, E, K)
    g8 = torch.Generator().manual_seed(7 + rank)
    x_e4m3 = torch.randn(n, hidden, generator=g8).to(torch.float8_e4m3fn)
    x_sf = torch.randn(n, hidden // 128, generator=g8)
    all_idx, all_w, all_x = allgather(topk_idx), allgather(topk_w), allgather(x)
    all_e4m3, all_sf = allgather(x_e4m3), allgather(x_sf)
    T = max(t.shape[0] for t in all_idx)
    ref = Ref(all_idx, el)

    # constructor from the MoE settings: the size is the hint's
    buf = make_buffer(num_max_tokens_per_rank=T, hidden=hidden, num_topk=K, deterministic=True,
                      explicitly_destroy=True)
    hint = deep_ep.ElasticBuffer.get_buffer_size_hint(comm, T, hidden, K)
    assert buf.num_bytes == hint and hint % (2 << 20) == 0
    assert (buf.rank_idx, buf.num_ranks) == (rank, R)
    rpn = int(os.environ.get('TS_EP_RANKS_PER_NODE', R))
    assert buf.get_physical_domain_size() == (R // rpn, rpn) == buf.get_logical_domain_size()
    assert (buf.num_rdma_ranks, buf.num_nvlink_ranks) == (R // rpn, rpn)
    assert (buf.scaleout_rank_idx, buf.scaleup_rank_idx) == (rank // rpn, rank % rpn)
    sms = buf.get_theoretical_num_sms(E, K)
    assert sms >= 1 and (sms == 1 or sms % 2 == 0) and buf.get_theoretical_num_qps(sms) == sms
    buf.barrier()

    def completed(ev):
        assert isinstance(ev, deep_ep.EventOverlap) and ev.event is None
        ev.current_stream_wait()

    exp_x = ref.gather(all_x, (hidden,), torch.bfloat16)
    exp_w = ref.weights(all_w, K)

    # ---- normal dispatch ----
    for A in (1, 4):
        cum = torch.zeros(el, dtype=torch.int32)
        recv_x, recv_idx, recv_w, h, ev = buf.dispatch(x, topk_idx, topk_w, cumulative_local_expert_recv_stats=cum,
                                                       num_experts=E, expert_alignment=A)
        completed(ev)
        same(recv_x, exp_x, 'recv_x')
        same(recv_idx, ref.idx(torch.int64, K), 'recv_topk_idx')
        same(recv_w, exp_w, 'recv_topk_weights')
        same(cum, torch.tensor(ref.counts, dtype=torch.int32), 'cumulative_local_expert_recv_stats')
        check_handle(h, ref, A, False, n, K, topk_idx, E)
        assert h.num_max_tokens_per_rank == T
        assert h.cached_recv_src_metadata_before_sort is not None  # deterministic=True ran the epilogue

    # determinism: the same call twice gives the same bits
    r1 = buf.dispatch(x, topk_idx, topk_w, num_experts=E, expert_alignment=4, do_expand=True, do_zero_padding=True)
    r2 = buf.dispatch(x, topk_idx, topk_w, num_experts=E, expert_alignment=4, do_expand=True, do_zero_padding=True)
    for a, b, what in ((r1[0], r2[0], 'recv_x'), (r1[1], r2[1], 'recv_topk_idx'), (r1[2], r2[2], 'recv_topk_weights'),
                       (r1[3].recv_src_metadata, r2[3].recv_src_metadata, 'recv_src_metadata')):
        same(a, b, f'run twice: {what}')
    c1 = buf.combine(r1[0], r1[3], topk_weights=r1[2])
    c2 = buf.combine(r2[0], r2[3], topk_weights=r2[2])
    same(c1[0], c2[0], 'run twice: combined_x')

    # ---- expanded dispatch (one row per (token, local expert), grouped, padded) ----
    for A, zero in ((1, False), (4, True), (8, True)):
        recv_x, recv_idx, recv_w, h, ev = buf.dispatch(x, topk_idx, topk_w, num_experts=E, expert_alignment=A,
                                                       do_expand=True, do_zero_padding=zero)
        completed(ev)
        slots, _, _ = ref.expanded(A)
        assert recv_x.shape == (len(slots), hidden) and recv_w.shape == (len(slots),)
        for s, src in enumerate(slots):
            if src is None:
                assert float(recv_w[s]) == 0.0, f'padding weight {s}'
                if zero:
                    assert bool((recv_x[s].float() == 0).all()), f'padding row {s} not zero'
            else:
                same(recv_x[s], exp_x[src[0]], f'expanded row {s}')
                assert float(recv_w[s]) == float(exp_w[src[0], src[1]]), f'expanded weight {s}'
        same(recv_idx, ref.idx(torch.int64, K), 'expanded recv_topk_idx (per received token)')
        check_handle(h, ref, A, True, n, K, topk_idx, E)
    h_exp, recv_x_exp, recv_w_exp = h, recv_x, recv_w

    # ---- FP8 (x, sf): rows and scales passed through, normal and expanded ----
    exp_e4m3 = ref.gather(all_e4m3, (hidden,), torch.float8_e4m3fn)
    exp_sf = ref.gather(all_sf, (hidden // 128,), torch.float32)
    (r8, rsf), _, _, _, _ = buf.dispatch((x_e4m3, x_sf), topk_idx, topk_w, num_experts=E)
    same(r8, exp_e4m3, 'recv_x (e4m3)')
    same(rsf, exp_sf, 'recv_sf')
    (r8, rsf), _, _, h8, _ = buf.dispatch((x_e4m3, x_sf), topk_idx, num_experts=E, expert_alignment=4, do_expand=True,
                                          do_zero_padding=True)
    slots, _, _ = ref.expanded(4)
    for s, src in enumerate(slots):
        if src is None:
            assert bool((bits(r8[s]) == 0).all()) and bool((rsf[s] == 0).all()), f'fp8 padding {s}'
        else:
            same(r8[s], exp_e4m3[src[0]], f'fp8 expanded row {s}')
            same(rsf[s], exp_sf[src[0]], f'fp8 expanded sf {s}')

    # ---- cached dispatch via the handle: the first dispatch's result, and new rows ----
    recv_x, recv_idx, recv_w, h, _ = buf.dispatch(x, topk_idx, topk_w, num_experts=E, expert_alignment=4)
    cx, cidx, cw, ch, ev = buf.dispatch(x, handle=h)
    completed(ev)
    assert ch is h and cidx is None and cw is None
    same(cx, recv_x, 'cached recv_x = first')
    x2 = (x.float() * 3 + 1).to(torch.bfloat16)
    cx, _, _, _, _ = buf.dispatch(x2, handle=h)
    same(cx, ref.gather(allgather(x2), (hidden,), torch.bfloat16), 'cached recv_x (new rows)')
    cx, cidx, cw, _, _ = buf.dispatch(x, topk_weights=topk_w, handle=h)  # weights re-sent
    same(cx, recv_x, 'cached recv_x with weights')
    same(cidx, recv_idx, 'cached recv_topk_idx with weights')
    same(cw, recv_w, 'cached recv_topk_weights')
    (c8, csf), _, _, _, _ = buf.dispatch((x_e4m3, x_sf), handle=h8, do_expand=True, do_zero_padding=True)
    same(c8, r8, 'cached expanded fp8 rows')
    same(csf, rsf, 'cached expanded fp8 sf')
    cx, _, cw, _, _ = buf.dispatch(x, topk_weights=topk_w, handle=h_exp, do_expand=True, do_zero_padding=True)
    same(cx, recv_x_exp, 'cached expanded recv_x')
    same(cw, recv_w_exp, 'cached expanded recv_topk_weights')

    # ---- combine, not expanded: unweighted f32 sum over ranks ascending (+ bias), one rounding ----
    def weighted(rows, w):  # caller-side expert output
        return (rows.float() * w.sum(1, keepdim=True)).to(torch.bfloat16)

    def rank_of(idx):
        return torch.where(idx >= 0, idx // el, torch.full_like(idx, -1))

    y = weighted(recv_x, recv_w)
    bias0 = torch.randn(n, hidden, generator=torch.Generator().manual_seed(55 + rank)).to(torch.bfloat16)
    bias1 = torch.randn(n, hidden, generator=torch.Generator().manual_seed(77 + rank)).to(torch.bfloat16)
    valid_w = torch.where(topk_idx >= 0, topk_w, torch.zeros_like(topk_w))
    for bias in (None, bias0, (bias0, bias1)):
        out, out_w, ev = buf.combine(y, h, topk_weights=recv_w, bias=bias)
        completed(ev)
        acc = torch.zeros(n, hidden, dtype=torch.float32)
        for bb in (() if bias is None else bias if isinstance(bias, tuple) else (bias,)):
            acc = acc + bb.float()
        for r in range(R):
            sel = rank_of(topk_idx) == r
            yr = weighted(x, torch.where(sel, topk_w, torch.zeros_like(topk_w)))
            acc = torch.where(sel.any(1)[:, None], acc + yr.float(), acc)
        same(out, acc.to(torch.bfloat16), f'combined_x (bias {type(bias).__name__})')
        same(out_w, valid_w, 'combined_topk_weights')
    out, out_w, _ = buf.combine(y, h)
    assert out_w is None

    # ---- combine, expanded: per rank acc = fmaf(row, w, acc) in top-k order, bf16; then the sum ----
    def expanded_ref(w_of, bias):
        acc = torch.zeros(n, hidden, dtype=torch.float32)
        for bb in (() if bias is None else (bias,)):
            acc = acc + bb.float()
        for r in range(R):
            yr = torch.zeros(n, hidden, dtype=torch.float32)
            for k in range(K):
                on_r = (rank_of(topk_idx[:, k]) == r)[:, None]
                fma = (x.double() * w_of[:, k:k + 1].double() + yr.double()).float()  # exact, so one rounding
                yr = torch.where(on_r, fma, yr)
            went = (rank_of(topk_idx) == r).any(1)[:, None]
            acc = torch.where(went, acc + yr.to(torch.bfloat16).float(), acc)
        return acc.to(torch.bfloat16)

    out, out_w, _ = buf.combine(recv_x_exp, h_exp, topk_weights=recv_w_exp, bias=bias0)
    same(out, expanded_ref(topk_w, bias0), 'expanded combined_x (weighted, bias)')
    same(out_w, valid_w, 'expanded combined_topk_weights')
    out, out_w, _ = buf.combine(recv_x_exp, h_exp)
    assert out_w is None
    same(out, expanded_ref(torch.ones_like(topk_w), None), 'expanded combined_x (unweighted)')

    # ---- no copy: the C call gets the caller's own tensors (strided x, int32 ids) ----
    wide = torch.zeros(n, hidden + 64, dtype=torch.bfloat16)
    xs = wide[:, 32:32 + hidden]
    xs.copy_(x)
    idx32 = topk_idx.to(torch.int32)
    cum = torch.zeros(el, dtype=torch.int32)
    seen = {}
    real_dispatch, real_combine = C.ep_elastic_dispatch, C.ep_elastic_combine

    def spy(name, real):
        def f(*args):
            seen[name] = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]
            return real(*args)
        return f

    C.ep_elastic_dispatch, C.ep_elastic_combine = spy('dispatch', real_dispatch), spy('combine', real_combine)
    try:
        rx, ridx, rw, hs, _ = buf.dispatch(xs, idx32, topk_w, cumulative_local_expert_recv_stats=cum, num_experts=E)
        out, _, _ = buf.combine(rx, hs, topk_weights=rw, bias=bias0)
    finally:
        C.ep_elastic_dispatch, C.ep_elastic_combine = real_dispatch, real_combine
    assert seen['dispatch'][1:6] == [xs.data_ptr(), None, idx32.data_ptr(), topk_w.data_ptr(), cum.data_ptr()]
    assert seen['combine'][2:5] == [rx.data_ptr(), rw.data_ptr(), bias0.data_ptr()]
    same(rx, exp_x, 'recv_x from a strided x')
    same(ridx, ref.idx(torch.int32, K), 'recv_topk_idx (int32 ids)')
    same(hs.topk_idx, topk_idx, 'handle.topk_idx from int32 ids')
    same(cum, torch.tensor(ref.counts, dtype=torch.int32), 'stats updated in place')

    # ---- argument errors: the class, the argument named, nothing written ----
    cum = torch.full((el,), 7, dtype=torch.int32)
    x_before, idx_before = x.clone(), topk_idx.clone()
    last = {R - 1}
    bad_w = topk_w[:, :K - 1] if rank == R - 1 else topk_w
    expect_error(lambda: buf.dispatch(x, topk_idx, bad_w, cumulative_local_expert_recv_stats=cum, num_experts=E),
                 'bad topk_weights', ValueError, 'topk_weights', last)
    expect_error(lambda: buf.dispatch(x, topk_idx, topk_w, cumulative_local_expert_recv_stats=cum,
                                      num_experts=E + (1 if rank == R - 1 else 0)),
                 'bad num_experts', ValueError, 'num_experts', last)
    big_x = torch.zeros(T + 1, hidden, dtype=torch.bfloat16) if rank == R - 1 else x
    big_idx = torch.full((T + 1, K), -1, dtype=torch.int64) if rank == R - 1 else topk_idx
    expect_error(lambda: buf.dispatch(big_x, big_idx, None, cumulative_local_expert_recv_stats=cum, num_experts=E),
                 'too many tokens', ValueError, 'num_max_tokens_per_rank', last)
    expect_error(lambda: buf.dispatch(x, topk_idx, topk_w, cumulative_local_expert_recv_stats=cum, num_experts=E,
                                      do_zero_padding=True),
                 'do_zero_padding without do_expand', ValueError, 'do_zero_padding', set(range(R)))
    expect_error(lambda: buf.dispatch(x, topk_idx, topk_w, num_experts=E, expert_alignment=0),
                 'expert_alignment 0', ValueError, 'expert_alignment', set(range(R)))
    expect_error(lambda: buf.dispatch(x, handle=h, do_cpu_sync=True), 'cached do_cpu_sync', ValueError,
                 'do_cpu_sync', set(range(R)))
    expect_error(lambda: buf.dispatch(x, topk_idx, num_experts=E, num_max_tokens_per_rank=T << 20), 'buffer too small',
                 ValueError, 'bytes', set(range(R)))
    expect_error(lambda: buf.dispatch((x_e4m3, x_sf), topk_idx, num_experts=E, use_tma_aligned_col_major_sf=True),
                 'tma sf', NotImplementedError, 'use_tma_aligned_col_major_sf', set(range(R)))
    same(cum, torch.full((el,), 7, dtype=torch.int32), 'stats untouched by failed dispatches')
    same(x, x_before, 'x untouched')
    same(topk_idx, idx_before, 'topk_idx untouched')
    expect_error(lambda: buf.combine(recv_x, h, topk_weights=recv_w.double() if rank == R - 1 else recv_w),
                 'bad combine topk_weights', TypeError, 'topk_weights', last)
    expect_error(lambda: buf.combine(recv_x_exp, h_exp, topk_weights=recv_w_exp[:, None] if rank == R - 1 else recv_w_exp),
                 'short expanded weights', ValueError, 'topk_weights', last)
    # Python-level type errors: raised locally, before any collective (every rank makes them here)
    for call, word in ((lambda: buf.dispatch(x, handle=(1, 2)), "'handle'"),
                       (lambda: buf.combine(recv_x, 'h'), "'handle'"),
                       (lambda: buf.dispatch(x, topk_idx, num_experts='8'), "'num_experts'"),
                       (lambda: buf.combine(recv_x, h, bias=3), "'bias'"),
                       (lambda: buf.dispatch((x,), topk_idx, num_experts=E), "'x'")):
        try:
            call()
            raise AssertionError(f'{word} did not raise')
        except TypeError as e:
            assert word in str(e), str(e)
    # the parts the library reports unsupported
    for call, word in ((lambda: buf.engram_write(x), 'Engram'), (lambda: buf.engram_fetch(idx32), 'Engram'),
                       (lambda: buf.pp_set_config(1 << 20, 2), 'pipeline-parallel'),
                       (lambda: buf.pp_send(x, (rank + 1) % R), 'pipeline-parallel'),
                       (lambda: buf.pp_recv(x, (rank + 1) % R), 'pipeline-parallel'),
                       (lambda: buf.agrs_set_config(1 << 20, 4), 'AGRS'), (lambda: buf.create_agrs_session(), 'AGRS'),
                       (lambda: buf.destroy_agrs_session(), 'AGRS'), (lambda: buf.all_gather(x), 'AGRS'),
                       (lambda: buf.agrs_new_session().__enter__(), 'AGRS'),
                       (lambda: buf.agrs_get_inplace_tensor((4, 4), torch.bfloat16), 'AGRS'),
                       (lambda: deep_ep.ElasticBuffer.get_pp_buffer_size_hint(1 << 20, 2), 'pipeline-parallel')):
        try:
            call()
            raise AssertionError(f'{word} did not raise')
        except NotImplementedError as e:
            assert word in str(e), str(e)
    # ... and the buffer still works
    recv_x, *_ = buf.dispatch(x, topk_idx, topk_w, num_experts=E)
    same(recv_x, exp_x, 'recv_x after the errors')

    # no reference kept past a call, on success or error (every rank makes the same calls)
    objs = (x, topk_idx, topk_w, cum, bias0, h, h_exp, recv_x_exp, recv_w_exp)
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(20):
        buf.dispatch(x, topk_idx, topk_w, cumulative_local_expert_recv_stats=cum, num_experts=E)
        buf.dispatch(x, topk_weights=topk_w, handle=h)
        buf.combine(recv_x_exp, h_exp, topk_weights=recv_w_exp, bias=bias0)
        for call in (lambda: buf.dispatch(x, topk_idx, topk_w, num_experts=E, do_zero_padding=True),
                     lambda: buf.combine(recv_x_exp, h_exp, topk_weights=recv_w_exp[:, None], bias=bias0)):
            try:
                call()
                raise AssertionError('no error')
            except ValueError:
                pass
    assert [sys.getrefcount(o) for o in objs] == before, 'a reference was kept'
    buf.destroy()

    # a buffer sized by num_bytes, num_max_tokens_per_rank given per call; deterministic off
    buf = make_buffer(num_bytes=hint, explicitly_destroy=True)
    assert buf.num_bytes == hint and not buf.deterministic
    recv_x, _, _, h, _ = buf.dispatch(x, topk_idx, topk_w, num_experts=E, num_max_tokens_per_rank=T)
    same(recv_x, exp_x, 'recv_x (num_bytes buffer)')
    assert h.num_max_tokens_per_rank == T and h.cached_recv_src_metadata_before_sort is None
    assert h.topk_idx is not topk_idx  # do_handle_copy=True: a copy
    _, _, _, h, _ = buf.dispatch(x, topk_idx, num_experts=E, num_max_tokens_per_rank=T, do_handle_copy=False)
    assert h.topk_idx is topk_idx
    expect_error(lambda: buf.dispatch(x, topk_idx, topk_w, num_experts=E), 'no num_max_tokens_per_rank', ValueError,
                 'num_max_tokens_per_rank', set(range(R)))
    buf.destroy()


def main():
    global GROUP
    if '--group' in sys.argv:
        import torch.distributed as dist
        dist.init_process_group('gloo', rank=rank, world_size=R,
                                init_method='tcp://127.0.0.1:%s' % os.environ['TS_EP_TEST_PORT'])
        GROUP = dist.group.WORLD
    main_checks()
    comm.Barrier()
    print(f'ELASTIC_OK rank {rank} of {R}', flush=True)


if __name__ == '__main__':
    try:
        main()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        comm.Abort(1)
