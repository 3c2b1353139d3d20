"""One rank of the deep_ep checks; test_deep_ep.py runs it under `mpirun -np N`. Every rank
all-gathers every rank's inputs and builds what it must receive with plain torch loops, then
checks deep_ep's outputs bit for bit (upstream test_intranode / test_low_latency's identities
as well). A failure prints the traceback and aborts the whole job, so nothing hangs.

Usage: ep_worker.py [--group]  (--group: a torch.distributed gloo group instead of comm=)."""
import os
import sys
import traceback

import torch
from mpi4py import MPI

import deep_ep

comm = MPI.COMM_WORLD
rank, R = comm.Get_rank(), comm.Get_size()



def expect_bad_on_last_rank(call, what, exc, word):
    """`call` fails on every rank: the last (bad) rank with `exc` naming `word`, the others with
    RuntimeError naming that rank (tilestack's TS_ERR_PEER)."""
    try:
        call()
    except Exception as e:  # noqa: BLE001
        if os.environ.get('TS_EP_TEST_VERBOSE'):
            print(f'rank {rank}: {type(e).__name__}: {e}', flush=True)
        if rank == R - 1:
            assert isinstance(e, exc) and word in str(e), f'bad rank got {type(e).__name__}: {e}'
        else:
            assert type(e) is RuntimeError and str(R - 1) in str(e), f'peer got {type(e).__name__}: {e}'
        return
    raise AssertionError(f'{what} did not raise')

def bits(t):
    """Integer view for bit-for-bit comparison."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b, what):
    assert a.shape == b.shape, f'{what}: shape {tuple(a.shape)} != {tuple(b.shape)}'
    assert a.dtype == b.dtype, f'{what}: dtype {a.dtype} != {b.dtype}'
    assert torch.equal(bits(a), bits(b)), f'{what}: values differ'


def allgather(t):
    """Every rank's tensor (sent as bytes: pickle does not know every dtype)."""
    parts = comm.allgather((t.dtype, tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes()))
    return [torch.frombuffer(bytearray(b), dtype=torch.uint8).view(dt).reshape(sh) if b else torch.empty(sh, dtype=dt)
            for dt, sh, b in parts]


def source_blocks(buf, handle):
    """R + 1 row offsets of the source blocks of this rank's recv_x, from upstream's handle:
    intranode rank_prefix_matrix[:, rank] = handle[0], internode recv_gbl_rank_prefix_sum =
    handle[-4] (both inclusive prefixes)."""
    col = handle[-4] if buf.num_rdma_ranks > 1 else handle[0][:, buf.rank]
    return [0] + col.tolist()


def check_handle(buf, handle, itir, g_ntpr_rows, n):
    """The tuple against upstream's shape and meaning: 6 (intranode) / 10 (internode) entries;
    rank_prefix_matrix = the all-gathered num_tokens_per_rank summed over sources (inclusive);
    send_head[t][d] = the row of token t in rank d's recv_x (checked through d's recv_src_idx)."""
    assert type(handle) is tuple
    if buf.num_rdma_ranks > 1:
        assert len(handle) == 10 and handle[0] is itir
        same(handle[6], g_ntpr_rows.cumsum(0, dtype=torch.int32)[:, rank], 'recv_gbl_rank_prefix_sum')
        return
    assert len(handle) == 6 and handle[4] is itir and handle[1] is None and handle[2] is None
    rpm, src_idx, send_head = handle[0], handle[3], handle[5]
    same(rpm, g_ntpr_rows.cumsum(0, dtype=torch.int32), 'rank_prefix_matrix')
    assert send_head.dtype == torch.int32 and tuple(send_head.shape) == (n, R)
    assert bool(((send_head >= 0) == itir).all()), 'send_head -1 exactly where a token is not sent'
    all_src = allgather(src_idx)
    for d in range(R):
        rows = send_head[:, d]
        ok = rows >= 0
        got = all_src[d][rows[ok].long()]
        same(got, torch.arange(n, dtype=torch.int32)[ok], f'send_head into rank {d}')


def make_buffer(**kw):
    if '--group' in sys.argv:
        return deep_ep.Buffer(GROUP, **kw)
    return deep_ep.Buffer(None, comm=comm, **kw)


def gen_inputs(seed, n, hidden, E, K):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, E, generator=g).abs() + 1
    topk_idx = torch.topk(scores, K, dim=-1, sorted=False).indices.to(deep_ep.topk_idx_t)
    mask = torch.rand(n, K, generator=g) < 0.15
    topk_idx[mask] = -1
    topk_w = torch.randn(n, K, generator=g).abs()
    x = torch.randn(n, hidden, generator=g).to(torch.bfloat16)
    return topk_idx, topk_w, x


def normal_mode():
    hidden, K, E = 256, 4, 8 * R
    el = E // R
    n = 40 + 7 * rank if rank != 1 else 0  # rank 1 sends nothing
    topk_idx, topk_w, x = gen_inputs(100 + rank, n, hidden, E, K)
    x_rank = torch.full((n, hidden), float(rank), dtype=torch.bfloat16)
    x_e4m3 = torch.randn(n, hidden, generator=torch.Generator().manual_seed(7 + rank)).to(torch.float8_e4m3fn)
    # column-major scales view [n, hidden/128], as upstream's test
    x_sc = torch.randn(hidden // 128, n).t()
    all_idx = allgather(topk_idx)
    all_w = allgather(topk_w)
    all_x = allgather(x)
    all_e4m3 = allgather(x_e4m3)
    all_sc = allgather(x_sc)
    n_max = max(t.shape[0] for t in all_idx)

    nb = deep_ep.Buffer.get_buffer_size_hint(R, n_max, hidden, K, hidden // 128, False)
    buf = make_buffer(num_nvl_bytes=nb, explicitly_destroy=True)
    assert (buf.rank, buf.group_size) == (rank, R)

    # layout vs torch
    ntpr, ntprdma, ntpe, itir, ev = buf.get_dispatch_layout(topk_idx, E)
    ev.current_stream_wait()
    rank_idx = torch.where(topk_idx >= 0, topk_idx // el, torch.full_like(topk_idx, -1))
    ref_itir = torch.zeros(n, R, dtype=torch.bool)
    for r in range(R):
        ref_itir[:, r] = (rank_idx == r).any(dim=1)
    ref_ntpe = torch.zeros(E, dtype=torch.int32)
    for e in range(E):
        ref_ntpe[e] = int((topk_idx == e).sum())
    same(itir, ref_itir, 'is_token_in_rank')
    same(ntpr, ref_itir.sum(0).to(torch.int32), 'num_tokens_per_rank')
    same(ntpe, ref_ntpe, 'num_tokens_per_expert')
    assert ntprdma is None or buf.num_rdma_ranks > 1

    # what this rank must receive: sources ascending, tokens ascending
    def expected(src_x):
        rows, ids, ws, src = [], [], [], []
        for s in range(R):
            idx_s = all_idx[s]
            for t in range(idx_s.shape[0]):
                local = [(int(e) - rank * el) if int(e) >= 0 and int(e) // el == rank else -1 for e in idx_s[t]]
                if any(v >= 0 for v in local):
                    rows.append(src_x[s][t])
                    ids.append(local)
                    ws.append([float(all_w[s][t][k]) if local[k] >= 0 else 0.0 for k in range(K)])
                    src.append(t)
        cols = src_x[0].shape[1:] if src_x[0].dim() > 1 else ()
        dt = src_x[0].dtype
        return (torch.stack(rows) if rows else torch.empty((0, *cols), dtype=dt),
                torch.tensor(ids, dtype=torch.int64).reshape(-1, K),
                torch.tensor(ws, dtype=torch.float32).reshape(-1, K),
                torch.tensor(src, dtype=torch.int32))

    exp_x, exp_idx, exp_w, exp_src = expected(all_x)
    g_ntpr_rows = torch.stack(allgather(ntpr))  # [source, destination]
    g_ntpr = g_ntpr_rows.sum(0)
    g_ntpe = torch.stack(allgather(ntpe)).sum(0)

    for align in (1, 4):
        recv_x, recv_idx, recv_w, per_expert, handle, ev = buf.dispatch(
            x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
            topk_idx=topk_idx, topk_weights=topk_w, expert_alignment=align)
        ev.current_stream_wait()
        same(recv_x, exp_x, 'recv_x')
        same(recv_idx, exp_idx, 'recv_topk_idx')
        same(recv_w, exp_w, 'recv_topk_weights')
        if buf.num_rdma_ranks == 1:
            same(handle[3], exp_src, 'recv_src_idx')
        check_handle(buf, handle, itir, g_ntpr_rows, n)
        assert recv_x.shape[0] == int(g_ntpr[rank]), 'received count != global num_tokens_per_rank[rank]'
        want = [-(-int(c) // align) * align for c in g_ntpe[rank * el:(rank + 1) * el]]
        assert per_expert == want, f'num_recv_tokens_per_expert_list {per_expert} != {want}'
        if align == 1:
            assert per_expert == [int((recv_idx == i).sum()) for i in range(el)]

    # rank-valued x: each source block of the handle holds that rank
    recv_r, _, _, _, handle_r, _ = buf.dispatch(
        x_rank, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
        topk_idx=topk_idx, topk_weights=topk_w)
    pre = source_blocks(buf, handle_r)
    assert pre[0] == 0 and pre[-1] == recv_r.shape[0]
    for s in range(R):
        blk = recv_r[pre[s]:pre[s + 1]]
        goes = torch.where(all_idx[s] >= 0, all_idx[s] // el, torch.full_like(all_idx[s], -1)) == rank
        assert blk.shape[0] == int(goes.any(1).sum()), f'block of source {s} has the wrong size'
        assert bool((blk.float() == s).all()), f'block of source {s} is not rank-valued'

    # FP8 with column-major scales: rows and scales passed through
    (r8, rs), _, _, _, _, _ = buf.dispatch(
        (x_e4m3, x_sc), num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
        topk_idx=topk_idx, topk_weights=topk_w)
    same(r8, expected(all_e4m3)[0], 'recv_x (e4m3)')
    same(rs, expected([s.contiguous() for s in all_sc])[0], 'recv_x_scales')

    # num_worst_tokens: the exact result as prefix, -1 padding, empty list
    worst = n_max * R
    wx, widx, ww, wlist, _, _ = buf.dispatch(
        x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
        topk_idx=topk_idx, topk_weights=topk_w, num_worst_tokens=worst)
    m = exp_x.shape[0]
    assert wx.shape[0] == worst and wlist == []
    same(wx[:m], exp_x, 'num_worst_tokens recv_x prefix')
    same(widx[:m], exp_idx, 'num_worst_tokens recv_topk_idx prefix')
    assert bool((widx[m:] == -1).all())

    # cached dispatch with new rows
    recv_x, recv_idx, recv_w, per_expert, handle, _ = buf.dispatch(
        x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
        topk_idx=topk_idx, topk_weights=topk_w)
    x2 = (x.float() * 3 + 1).to(torch.bfloat16)
    cx, a, b, c, d, _ = buf.dispatch(x2, handle=handle)
    assert (a, b, c, d) == (None, None, None, None)
    same(cx, expected(allgather(x2))[0], 'cached recv_x')
    # a tuple rebuilt from the handle's tensors works too (a copy of them does not: TypeError, local)
    cx, *_ = buf.dispatch(x2, handle=tuple(list(handle)))
    same(cx, expected(allgather(x2))[0], 'cached recv_x (rebuilt tuple)')
    try:
        buf.dispatch(x2, handle=tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in handle))
        raise AssertionError('a handle of copied tensors did not raise')
    except TypeError as e:
        assert "'handle'" in str(e), str(e)

    # async_finish=True (with previous_event and allocate_on_comm_stream): the same outputs and
    # a completed EventOverlap that can be waited on and used as a context manager
    def completed(ev):
        assert isinstance(ev, deep_ep.EventOverlap) and ev.event is None
        ev.current_stream_wait()
        with ev:
            pass

    prev = deep_ep.Buffer.capture()
    completed(prev)
    a_ntpr, a_ntprdma, a_ntpe, a_itir, ev = buf.get_dispatch_layout(topk_idx, E, previous_event=prev, async_finish=True,
                                                                    allocate_on_comm_stream=True)
    completed(ev)
    same(a_ntpr, ntpr, 'async num_tokens_per_rank')
    same(a_itir, itir, 'async is_token_in_rank')
    ax, aidx, aw, alist, ahandle, ev = buf.dispatch(
        x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe, topk_idx=topk_idx,
        topk_weights=topk_w, previous_event=ev, async_finish=True, allocate_on_comm_stream=True)
    completed(ev)
    same(ax, recv_x, 'async recv_x')
    same(aidx, recv_idx, 'async recv_topk_idx')
    acx, _, _, _, _, ev = buf.dispatch(x2, handle=ahandle, async_finish=True)
    completed(ev)
    same(acx, cx, 'async cached recv_x')
    acomb, _, ev = buf.combine(recv_x, ahandle, previous_event=ev, async_finish=True, allocate_on_comm_stream=True)
    completed(ev)
    scomb, _, _ = buf.combine(recv_x, handle)
    same(acomb, scomb, 'async combined_x')

    # combine: expert outputs = received rows weighted by this rank's local weights (the
    # caller-side weighting of upstream's normal mode); reference = f32 sum over ranks ascending
    def weighted(rows, w):
        return (rows.float() * w.sum(1, keepdim=True)).to(torch.bfloat16)

    y = weighted(recv_x, recv_w)
    bias0 = torch.randn(n, hidden, generator=torch.Generator().manual_seed(55 + rank)).to(torch.bfloat16)
    bias1 = torch.randn(n, hidden, generator=torch.Generator().manual_seed(77 + rank)).to(torch.bfloat16)
    for bias in (None, bias0, (bias0, bias1)):
        cx, cw, ev = buf.combine(y, handle, topk_weights=recv_w, bias=bias)
        ev.current_stream_wait()
        acc = torch.zeros(n, hidden, dtype=torch.float32)
        if bias is not None:
            for bb in (bias if isinstance(bias, tuple) else (bias,)):
                acc = acc + bb.float()
        for r in range(R):
            # the rows rank r holds for my tokens, as r computes them
            sel = torch.where(topk_idx >= 0, topk_idx // el, torch.full_like(topk_idx, -1)) == r
            w_r = torch.where(sel, topk_w, torch.zeros_like(topk_w))
            went = sel.any(1)
            yr = weighted(x, w_r)
            acc = torch.where(went[:, None], acc + yr.float(), acc)
        same(cx, acc.to(torch.bfloat16), f'combined_x (bias {type(bias).__name__})')
        same(cw, torch.where(topk_idx >= 0, topk_w, torch.zeros_like(topk_w)), 'combined_topk_weights')

    # bad input on the last rank only: it names the argument, the others RuntimeError (peer)
    bad_w = topk_w[:, :K - 1] if rank == R - 1 else topk_w
    expect_bad_on_last_rank(
        lambda: buf.dispatch(x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
                             topk_idx=topk_idx, topk_weights=bad_w),
        'bad topk_weights', ValueError, 'topk_weights')
    # the same in combine: f64 weights on the last rank
    recv_x, _, recv_w, _, handle, _ = buf.dispatch(
        x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
        topk_idx=topk_idx, topk_weights=topk_w)
    expect_bad_on_last_rank(
        lambda: buf.combine(recv_x, handle, topk_weights=recv_w.double() if rank == R - 1 else recv_w),
        'bad combine topk_weights', TypeError, 'topk_weights')
    # ... and the buffer still works
    recv_x, *_ = buf.dispatch(x, num_tokens_per_rank=ntpr, is_token_in_rank=itir, num_tokens_per_expert=ntpe,
                              topk_idx=topk_idx, topk_weights=topk_w)
    same(recv_x, exp_x, 'recv_x after the error')
    buf.destroy()


def low_latency_mode():
    hidden, K, E, T = 512, 4, 4 * R, 16
    el = E // R
    n = T - rank % 3
    g = torch.Generator().manual_seed(300 + rank)
    x = torch.full((n, hidden), float(rank - 128), dtype=torch.bfloat16)
    x[:, -128:] = torch.arange(n, dtype=torch.float32)[:, None].to(torch.bfloat16)
    scores = torch.randn(n, E, generator=g).abs() + 1
    topk_idx = torch.topk(scores, K, dim=-1).indices.to(deep_ep.topk_idx_t)
    topk_idx[torch.rand(n, K, generator=g) < 0.15] = -1
    topk_w = torch.randn(n, K, generator=g).abs()
    all_idx = allgather(topk_idx)
    all_x = allgather(x)

    nb = deep_ep.Buffer.get_low_latency_rdma_size_hint(T, hidden, R, E)
    buf = make_buffer(num_nvl_bytes=0, num_rdma_bytes=nb, low_latency_mode=True,
                      num_qps_per_rank=el, explicitly_destroy=True)
    buf.clean_low_latency_buffer(T, hidden, E)

    # expected per local expert: sources, tokens, top-k slots ascending
    exp = []
    for e in range(el):
        g_e = rank * el + e
        rows, src, lay = [], [], []
        for s in range(R):
            begin = len(rows)
            for t in range(all_idx[s].shape[0]):
                for k in range(K):
                    if int(all_idx[s][t][k]) == g_e:
                        rows.append(all_x[s][t])
                        src.append(t)
            lay.append((begin << 32) | (len(rows) - begin))
        exp.append((rows, src, lay))

    cum = torch.zeros(el, dtype=torch.int32)
    for use_hook in (False, True):
        for mode in ('bf16', 'fp8', 'fp8_round', 'fp8_ue8m0'):
            fp8 = mode != 'bf16'
            recv, count, handle, ev, hook = buf.low_latency_dispatch(
                x, topk_idx, T, E, cumulative_local_expert_recv_stats=cum, use_fp8=fp8,
                round_scale=mode in ('fp8_round', 'fp8_ue8m0'), use_ue8m0=mode == 'fp8_ue8m0',
                return_recv_hook=use_hook)
            ev.current_stream_wait()
            if use_hook:
                hook()
                try:
                    hook()
                    raise AssertionError('a hook ran twice')
                except RuntimeError:
                    pass
            src_info, layout_range = handle[0], handle[1]
            assert tuple(handle[2:]) == (T, hidden, E)
            for e in range(el):
                rows, src, lay = exp[e]
                c = len(rows)
                assert int(count[e]) == c, f'recv_count[{e}] {int(count[e])} != {c}'
                assert layout_range[e].tolist() == lay, f'layout_range[{e}]'
                assert src_info[e, :c].tolist() == src, f'src_info[{e}]'
                if not fp8:
                    same(recv[e, :c], torch.stack(rows) if rows else recv[e, :0], f'LL recv_x[{e}]')
                else:
                    q, sc = recv
                    if mode == 'fp8_ue8m0':
                        w = sc[e, :c].to(torch.int64) & 0xFFFFFFFF  # byte j of word i = scale 4i + j
                        b = torch.stack([(w >> (8 * j)) & 0xFF for j in range(4)], dim=-1).reshape(c, -1)
                        sf = (b.to(torch.int32) << 23).view(torch.float32)
                    else:
                        sf = sc[e, :c]
                    deq = q[e, :c].float().reshape(c, hidden // 128, 128) * sf[:, :, None]
                    ref = torch.stack(rows).float() if rows else torch.empty(0, hidden)
                    assert torch.allclose(deq.reshape(c, hidden), ref, rtol=0.07, atol=0.5), f'LL fp8 rows[{e}]'
        # combine with identity experts (bf16 rows fed back), copy and zero copy, hooks; the
        # dispatch and combine with async_finish=True (a completed event, the same rows)
        recv, count, handle, ev, _ = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=False, async_finish=True)
        assert isinstance(ev, deep_ep.EventOverlap) and ev.event is None
        ev.current_stream_wait()
        recv_a, count_a = recv.clone(), count.clone()
        out_a, ev, _ = buf.low_latency_combine(recv, topk_idx, topk_w, handle, async_finish=True)
        assert isinstance(ev, deep_ep.EventOverlap) and ev.event is None
        out_a = out_a.clone()
        recv, count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=False)
        same(count, count_a, 'LL async recv_count')
        for e in range(el):
            same(recv_a[e, :int(count[e])], recv[e, :int(count[e])], f'LL async recv_x[{e}]')
        out, ev, hook = buf.low_latency_combine(recv, topk_idx, topk_w, handle, return_recv_hook=use_hook)
        if use_hook:
            hook()
        ref = (x.double() * torch.where(topk_idx >= 0, topk_w, torch.zeros_like(topk_w)).double().sum(1, keepdim=True))
        err = (out.double() - ref).abs().max().item() if n else 0.0
        assert err <= 0.0079 * max(1.0, ref.abs().max().item()), f'LL combine error {err}'
        assert not torch.isnan(out.float()).any()
        same(out_a, out, 'LL async combined_x')
        recv, count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=False)
        zc = buf.get_next_low_latency_combine_buffer(handle)
        assert zc.shape == (el, R * T, hidden) and zc.dtype == torch.bfloat16
        zc.copy_(recv)
        out2 = torch.empty_like(out)
        out3, _, _ = buf.low_latency_combine(recv, topk_idx, topk_w, handle,
                                             zero_copy=True, out=out2)
        assert out3 is out2
        same(out2, out, 'LL combine zero copy')
    want_cum = torch.tensor([len(exp[e][0]) for e in range(el)], dtype=torch.int32) * 8
    same(cum, want_cum, 'cumulative_local_expert_recv_stats')

    # bad input on the last rank: more tokens than T
    bad_x = torch.zeros(T + 1, hidden, dtype=torch.bfloat16) if rank == R - 1 else x
    bad_idx = torch.full((T + 1, K), -1, dtype=torch.int64) if rank == R - 1 else topk_idx
    expect_bad_on_last_rank(lambda: buf.low_latency_dispatch(bad_x, bad_idx, T, E, use_fp8=False),
                            'too many tokens', ValueError, 'num_max_dispatch_tokens_per_rank')
    recv, count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=False)
    assert [int(c) for c in count] == [len(exp[e][0]) for e in range(el)]
    buf.destroy()


def subgroup_mode():
    """A torch.distributed subgroup (the ranks but rank 0) maps to an MPI communicator of the same
    ranks in the group's order: rank-valued rows come back in group-rank order and combine sums
    the copies."""
    import torch.distributed as dist
    members = list(range(1, R))
    group = dist.new_group(members)  # collective over the world, as torch requires
    if rank == 0:
        return
    me, G = group.rank(), group.size()
    hidden, K, E = 128, 2, 4 * G
    n = 8 + me
    g = torch.Generator().manual_seed(900 + rank)
    topk_idx = torch.topk(torch.rand(n, E, generator=g), K, dim=-1).indices.to(deep_ep.topk_idx_t)
    buf = deep_ep.Buffer(group, num_nvl_bytes=deep_ep.Buffer.get_buffer_size_hint(G, 16, hidden, K))
    assert (buf.rank, buf.group_size) == (me, G) == (dist.get_process_group_ranks(group).index(rank), R - 1)
    ntpr, _, ntpe, itir, _ = buf.get_dispatch_layout(topk_idx, E)
    x = torch.full((n, hidden), float(me), dtype=torch.bfloat16)
    recv, _, _, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=ntpr, is_token_in_rank=itir,
                                            num_tokens_per_expert=ntpe, topk_idx=topk_idx,
                                            topk_weights=torch.ones(n, K))
    pre = source_blocks(buf, handle)
    for s in range(G):
        assert bool((recv[pre[s]:pre[s + 1]].float() == s).all()), f'subgroup block {s}'
    cx, _, _ = buf.combine(recv, handle)
    same(cx, (x.float() * itir.sum(1, keepdim=True).float()).to(torch.bfloat16), 'subgroup combine')
    del buf  # not explicitly_destroy: released with the object (collective over the group)


def main():
    global GROUP
    if '--group' in sys.argv:
        import torch.distributed as dist
        dist.init_process_group('gloo', rank=rank, world_size=R,
                                init_method='tcp://127.0.0.1:%s' % os.environ['TS_EP_TEST_PORT'])
        GROUP = dist.group.WORLD
    normal_mode()
    low_latency_mode()
    if '--group' in sys.argv and R > 2:
        subgroup_mode()
    comm.Barrier()
    print(f'EP_OK rank {rank} of {R}', flush=True)


if __name__ == '__main__':
    GROUP = None
    try:
        main()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        comm.Abort(1)
