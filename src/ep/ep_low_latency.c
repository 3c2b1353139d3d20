/* Low-latency dispatch (upstream low_latency_dispatch): one message per (token, selected
 * expert), written by the source straight into block (expert, source) of the receiver's half;
 * the receive phase packs the blocks in source order. Also the LL state, the size hint, the
 * buffer clean, hooks and the LL handle. Protocol: ep_low_latency.h and docs/ep.md. */
#include "ep/ep_low_latency.h"
#include "ep/ep_ll_kernels.h"

#include <math.h>
#include <time.h>

#define LD "ts_ep_low_latency_dispatch"

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

ts__ep_ll_dlayout ts__ep_ll_dispatch_layout(int64_t R, int64_t T, int64_t K, int64_t hidden, bool fp8) {
    ts__ep_ll_dlayout l;
    const int64_t slots = R * T;
    l.nsc = fp8 ? hidden / 128 : 0;
    l.row_bytes = fp8 ? hidden : 2 * hidden;
    l.K = K;
    l.ids = 0;
    l.scales = ts__align(slots * K * 4, 64);
    l.rows = l.scales + ts__align(slots * l.nsc * 4, 64);
    l.total = l.rows + ts__align(slots * l.row_bytes, 64);
    return l;
}

ts__ep_ll_clayout ts__ep_ll_combine_layout(int64_t El, int64_t R, int64_t T, int64_t hidden) {
    ts__ep_ll_clayout l;
    const int64_t rows = El * R * T;
    l.begin = 0;
    l.meta = ts__align(El * R * 4, 64);
    l.rows = l.meta + ts__align(rows * (hidden / 128) * 4, 64);
    l.total = l.rows + ts__align(rows * hidden * 2, 64);
    return l;
}

static int64_t sig_bytes_of(int64_t R) { return ts__align((2 * R + 2) * (int64_t)sizeof(ts__ep_ll_sig), 4096); }

ts_status ts__ep_ll_init(ts_ep_buffer *b) {
    b->ll = calloc(1, sizeof *b->ll);
    if (!b->ll) return TS_ERR_OUT_OF_MEMORY;
    b->ll->sig_bytes = sig_bytes_of(b->num_ranks);
    const int64_t rest = b->num_rdma_bytes - b->ll->sig_bytes;
    b->ll->half_bytes = rest > 0 ? (rest / 2) & ~(int64_t)4095 : 0;
    if (b->num_nodes > 1) return ts__ep_ll_net_init(b);
    return TS_OK;
}

/* A combine hook that was never run still owns its slot array. */
static void drop_hook(ts_ep_ll_hook *hk) {
    if (hk->armed && hk->op == TS__EP_LL_COMBINE) free(hk->recv_x.data);
    hk->armed = false;
}

void ts__ep_ll_free(ts_ep_buffer *b) {
    if (b->ll)
        for (int h = 0; h < 2; h++) drop_hook(&b->ll->hooks[h]);
    ts__ep_ll_net_free(b);
    free(b->ll);
    b->ll = NULL;
}

ts_status ts_ep_get_low_latency_rdma_size_hint(int64_t T, int64_t hidden, int32_t num_ranks, int64_t num_experts,
                                               int64_t *num_rdma_bytes) {
    if (!num_rdma_bytes)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_get_low_latency_rdma_size_hint: num_rdma_bytes is NULL");
    if (T < 1 || T > (1 << 24) || hidden < 128 || hidden % 128 != 0 || hidden > (1 << 20) || num_ranks < 1 ||
        num_experts < num_ranks || num_experts % num_ranks != 0 || num_experts > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_ep_get_low_latency_rdma_size_hint: T %lld, hidden %lld (a multiple of 128), num_ranks %d, "
                        "num_experts %lld (a multiple of num_ranks) out of range",
                        (long long)T, (long long)hidden, num_ranks, (long long)num_experts);
    const int64_t El = num_experts / num_ranks;
    const int64_t d = ts__ep_ll_dispatch_layout(num_ranks, T, TS__EP_LL_HINT_TOPK, hidden, false).total;
    const int64_t c = ts__ep_ll_combine_layout(El, num_ranks, T, hidden).total;
    /* Across nodes a half also stages: a dispatch's messages to other nodes (a second
     * dispatch region, after the first) and a combine's rows from them (before the combine
     * region: this rank's selections of remote experts, budgeted for K <= 32 like the ids). */
    const int64_t k_hint = num_experts < TS__EP_LL_HINT_TOPK ? num_experts : TS__EP_LL_HINT_TOPK;
    const int64_t crecv = T * k_hint * (2 * hidden + hidden / 128 * 4);
    const int64_t stage = d > crecv ? d : crecv;
    const int64_t half = ts__align(d, 4096) + ts__align(stage, 4096) + ts__align(c, 4096) + 4096;
    *num_rdma_bytes = ts__align(sig_bytes_of(num_ranks) + 2 * half, INT64_C(2) << 20);
    return TS_OK;
}

ts_status ts__ep_ll_wait(ts_ep_buffer *b, _Atomic uint64_t *sig, uint64_t seq, int rank, const char *what,
                         int64_t *waited_ns) {
    uint64_t v = atomic_load_explicit(sig, memory_order_acquire);
    if (v == seq) return TS_OK;
    const int64_t t0 = now_ns();
    const int64_t deadline = t0 + (int64_t)(b->timeout_s * 1e9);
    ts__ep_backoff wait = TS__EP_BACKOFF_INIT;
    while ((v = atomic_load_explicit(sig, memory_order_acquire)) < seq) {
        if (ts__ep_backoff_step(&wait) && now_ns() > deadline) {
            b->broken = true;
            if (waited_ns) *waited_ns += now_ns() - t0;
            return ts__fail(TS_ERR_TIMEOUT,
                            "%s: rank %d waited %.1f s for rank %d, which did not send (LL call %llu); the buffer "
                            "can only be destroyed now",
                            what, b->rank, b->timeout_s, rank, (unsigned long long)seq);
        }
    }
    if (waited_ns) *waited_ns += now_ns() - t0;
    if (v != seq)
        return ts__fail(TS_ERR_PEER,
                        "%s: rank %d is already at LL call %llu while this rank receives call %llu: more than two LL "
                        "calls in flight", what, rank, (unsigned long long)v, (unsigned long long)seq);
    return TS_OK;
}

ts_status ts_ep_clean_low_latency_buffer(ts_ep_buffer *buf, int64_t T, int64_t hidden, int64_t num_experts) {
    static const char *what = "ts_ep_clean_low_latency_buffer";
    TS__RETURN_IF_ERROR(ts__ep_check_usable(buf, what));
    if (!buf->ll) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: buf was created without low_latency_mode", what);
    int64_t need;
    ts_status st = ts_ep_get_low_latency_rdma_size_hint(T, hidden, buf->num_ranks, num_experts, &need);
    /* Every rank takes part in both barriers whatever its arguments, so none is left waiting. */
    TS__RETURN_IF_ERROR(ts__ep_barrier(buf, what));
    if (st == TS_OK) {
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < buf->num_ranks; s++) {
                ts__ep_ll_sig *g = ts__ep_ll_dsig(buf, buf->rank, h, s);
                atomic_store_explicit(&g->seq, 0, memory_order_relaxed);
            }
            atomic_store_explicit(&ts__ep_ll_csig(buf, buf->rank, h)->seq, 0, memory_order_relaxed);
            drop_hook(&buf->ll->hooks[h]);
            /* the call numbers restart: queued messages of failed calls would match again */
            if (st == TS_OK) st = ts__ep_ll_net_drain(buf, h, what);
            ts__ep_ll_net_abandon(buf, h);
        }
        buf->ll->seq = 0;
    }
    TS__RETURN_IF_ERROR(ts__ep_barrier(buf, what));
    return st;
}

ts_status ts_ep_ll_handle_destroy(ts_ep_ll_handle *h) {
    if (!h) return TS_OK;
    free(h->my_expert_counts);
    free(h->src_info);
    free(h->layout_range);
    free(h->recv_count);
    free(h);
    return TS_OK;
}

ts_status ts_ep_ll_handle_info(const ts_ep_ll_handle *h, const int32_t **src_info, const int64_t **layout_range,
                               int64_t *T, int64_t *hidden, int64_t *num_experts) {
    if (!h) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_ll_handle_info: h is NULL");
    if (src_info) *src_info = h->src_info;
    if (layout_range) *layout_range = h->layout_range;
    if (T) *T = h->T;
    if (hidden) *hidden = h->hidden;
    if (num_experts) *num_experts = h->E;
    return TS_OK;
}

ts_status ts_ep_ll_hook_run(ts_ep_ll_hook *hook) {
    if (!hook) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_ll_hook_run: hook is NULL");
    if (!hook->armed) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_ep_ll_hook_run: hook already run (one-shot)");
    hook->armed = false;
    if (hook->buf->broken) return ts__fail(TS_ERR_PEER, "ts_ep_ll_hook_run: an earlier call timed out");
    return hook->op == TS__EP_LL_DISPATCH ? ts__ep_ll_dispatch_recv(hook) : ts__ep_ll_combine_recv(hook);
}

/* ---- send phase ---- */

typedef struct send_ctx {
    ts_ep_buffer *b;
    const ts_tensor *x, *idx;
    int64_t N, K, hidden, El, T;
    bool fp8, round_scale;
    ts__ep_ll_dlayout lay;
    int half;
    int nthreads;
    int oom;
    ts__ep_ll_cast_fn cast;
    const int32_t *pos; /* across nodes: [N, R] packed index of token t in the message to rank d */
    int64_t stage_off;  /* the send staging (a dispatch layout, one block per rank) in my half */
} send_ctx;

static void send_task(void *vctx, int tid, int nthreads) {
    send_ctx *c = vctx;
    const ts_ep_buffer *b = c->b;
    const int R = b->num_ranks, me = b->rank;
    const int64_t t0 = c->N * tid / nthreads, t1 = c->N * (tid + 1) / nthreads;
    const int64_t nsc = c->lay.nsc, rb = c->lay.row_bytes, K = c->K;
    uint8_t *q = NULL;
    float *sc = NULL;
    int32_t *ids = ts__scratch(tid, (size_t)(K * 4 + (c->fp8 ? c->hidden + nsc * 4 + 128 : 0)));
    if (!ids) {
        c->oom = 1;
        return;
    }
    if (c->fp8) {
        q = (uint8_t *)ids + ts__align(K * 4, 64);
        sc = (float *)(void *)(q + ts__align(c->hidden, 64));
    }
    const int64_t xs = c->x->strides[0];
    for (int64_t t = t0; t < t1; t++) {
        const uint16_t *xr = (const uint16_t *)c->x->data + t * xs;
        bool cast = false;
        for (int64_t k = 0; k < K; k++) ids[k] = (int32_t)ts__ep_idx_at(c->idx, t, k);
        const int64_t slot = (int64_t)me * c->T + t;
        uint8_t *stage = c->pos ? ts__ep_ll_half(b, me, c->half) + c->stage_off : NULL;
        /* every destination gets the token's top-k row, so stale ids can never match */
        for (int d = 0; d < R; d++) {
            if (stage && !ts__ep_is_local(b, d))
                memcpy(stage + c->lay.ids + ((int64_t)d * c->T + t) * K * 4, ids, (size_t)K * 4);
            else
                memcpy(ts__ep_ll_half(b, d, c->half) + c->lay.ids + slot * K * 4, ids, (size_t)K * 4);
        }
        for (int64_t k = 0; k < K; k++) {
            if (ids[k] < 0) continue;
            const int d = (int)(ids[k] / c->El);
            bool seen = false;
            for (int64_t j = 0; j < k && !seen; j++) seen = ids[j] >= 0 && ids[j] / c->El == d;
            if (seen) continue; /* the row goes once per destination rank */
            if (c->fp8 && !cast) {
                c->cast(xr, c->hidden, c->round_scale, q, sc);
                cast = true;
            }
            uint8_t *reg;
            int64_t at = slot;
            if (stage && !ts__ep_is_local(b, d)) { /* packed: the message carries only d's tokens */
                reg = stage;
                at = (int64_t)d * c->T + c->pos[t * R + d];
            } else {
                reg = ts__ep_ll_half(b, d, c->half);
            }
            memcpy(reg + c->lay.rows + at * rb, c->fp8 ? q : (const uint8_t *)xr, (size_t)rb);
            if (c->fp8) memcpy(reg + c->lay.scales + at * nsc * 4, sc, (size_t)nsc * 4);
        }
    }
}

static ts_status validate_tensor_1d(const ts_tensor *t, ts_dtype dt, int64_t n, const char *name) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, dt));
    const int64_t sh[1] = {n};
    return ts_tensor_check_shape(t, name, 1, sh);
}

static ts_status validate(ts_ep_buffer *b, const ts_ep_ll_dispatch_args *a, const ts_ep_ll_dispatch_out *o,
                          ts_ep_ll_handle **handle, ts__ep_ll_dlayout *lay) {
    const int R = b->num_ranks;
    if (!b->ll) return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": buf was created without low_latency_mode");
    if (!a || !o || !handle)
        return ts__fail(TS_ERR_NULL_POINTER, LD ": %s is NULL", !a ? "args" : !o ? "out" : "handle");
    TS__RETURN_IF_ERROR(ts_tensor_check(a->x, LD ": x"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->x, LD ": x", TS_BF16));
    if (a->x->ndim != 2) return ts__fail(TS_ERR_SHAPE, LD ": x must be 2-D [num_tokens, hidden]");
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(a->x, LD ": x"));
    const int64_t N = a->x->shape[0], H = a->x->shape[1];
    const int64_t T = a->num_max_dispatch_tokens_per_rank, E = a->num_experts;
    if (H < 128 || H % 128 != 0 || H > (1 << 20) || (a->use_ue8m0 && H % 512 != 0))
        return ts__fail(TS_ERR_SHAPE, LD ": x: hidden %lld must be a positive multiple of %d", (long long)H,
                        a->use_ue8m0 ? 512 : 128);
    if (T < 1 || T > (1 << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": num_max_dispatch_tokens_per_rank %lld out of range [1, 2^24]",
                        (long long)T);
    if (N > T)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": x has %lld tokens, more than num_max_dispatch_tokens_per_rank %lld",
                        (long long)N, (long long)T);
    if (E < R || E % R != 0 || E > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": num_experts %lld is not a positive multiple of num_ranks %d",
                        (long long)E, R);
    if (a->use_ue8m0 && !a->round_scale)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": use_ue8m0 requires round_scale (as upstream)");
    if ((a->use_ue8m0 || a->round_scale) && !a->use_fp8)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": round_scale / use_ue8m0 need use_fp8");
    TS__RETURN_IF_ERROR(ts__ep_check_topk_idx(a->topk_idx, E, LD));
    if (a->topk_idx->shape[0] != N)
        return ts__fail(TS_ERR_SHAPE, LD ": topk_idx has %lld rows, x has %lld", (long long)a->topk_idx->shape[0],
                        (long long)N);
    const int64_t El = E / R, S = (int64_t)R * T;
    *lay = ts__ep_ll_dispatch_layout(R, T, a->topk_idx->shape[1], H, a->use_fp8);
    /* across nodes a second dispatch layout stages the messages, between the dispatch and
     * combine regions */
    const int64_t room = b->num_nodes > 1 ? ts__ep_ll_comb_off(b, ts__ep_ll_combine_layout(El, R, T, H).total)
                                          : b->ll->half_bytes;
    const int64_t need =
        b->num_nodes > 1 ? ts__ep_ll_stage_off(R, T, a->topk_idx->shape[1], H) + lay->total : lay->total;
    if (need > room)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        LD ": these limits need %lld bytes per LL half, num_rdma_bytes gives %lld; see "
                        "ts_ep_get_low_latency_rdma_size_hint", (long long)need, (long long)room);
    /* outputs */
    TS__RETURN_IF_ERROR(ts_tensor_check(o->recv_x, LD ": recv_x"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(o->recv_x, LD ": recv_x", a->use_fp8 ? TS_E4M3 : TS_BF16));
    const int64_t shx[3] = {El, S, H};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(o->recv_x, LD ": recv_x", 3, shx));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(o->recv_x, LD ": recv_x"));
    if (a->use_fp8) {
        if (!o->recv_x_scales) return ts__fail(TS_ERR_NULL_POINTER, LD ": recv_x_scales is required with use_fp8");
        TS__RETURN_IF_ERROR(ts_tensor_check(o->recv_x_scales, LD ": recv_x_scales"));
        TS__RETURN_IF_ERROR(
            ts_tensor_check_dtype(o->recv_x_scales, LD ": recv_x_scales", a->use_ue8m0 ? TS_I32 : TS_F32));
        const int64_t shs[3] = {El, S, a->use_ue8m0 ? H / 512 : H / 128};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(o->recv_x_scales, LD ": recv_x_scales", 3, shs));
    }
    TS__RETURN_IF_ERROR(validate_tensor_1d(o->recv_count, TS_I32, El, LD ": recv_count"));
    if (a->cumulative_local_expert_recv_stats)
        TS__RETURN_IF_ERROR(validate_tensor_1d(a->cumulative_local_expert_recv_stats, TS_I32, El,
                                               LD ": cumulative_local_expert_recv_stats"));
    if (a->dispatch_wait_recv_cost_stats)
        TS__RETURN_IF_ERROR(
            validate_tensor_1d(a->dispatch_wait_recv_cost_stats, TS_I64, R, LD ": dispatch_wait_recv_cost_stats"));
    ts_ep_ll_handle *h = calloc(1, sizeof *h);
    if (h) {
        h->my_expert_counts = calloc((size_t)E, sizeof *h->my_expert_counts);
        h->src_info = calloc((size_t)(El * S), sizeof *h->src_info);
        h->layout_range = calloc((size_t)(El * R), sizeof *h->layout_range);
        h->recv_count = calloc((size_t)El, sizeof *h->recv_count);
    }
    if (!h || !h->my_expert_counts || !h->src_info || !h->layout_range || !h->recv_count) {
        ts_ep_ll_handle_destroy(h);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no memory for the handle");
    }
    h->buf = b;
    h->num_ranks = R;
    h->T = T;
    h->hidden = H;
    h->E = E;
    h->El = El;
    h->my_tokens = N;
    h->my_topk = a->topk_idx->shape[1];
    *handle = h;
    return TS_OK;
}

/* The cast options of a dispatch as the signal's flags, compared by the receiver. */
static int sig_flags(const ts_ep_ll_dispatch_args *a) {
    return (a->use_fp8 ? 1 : 0) | (a->round_scale ? 2 : 0) | (a->use_ue8m0 ? 4 : 0);
}

static void fill_sig(ts__ep_ll_sig *g, ts_status st, const ts_ep_ll_dispatch_args *a) {
    g->status = st;
    g->flags = a ? sig_flags(a) : 0;
    g->hidden = a && a->x ? a->x->shape[1] : -1;
    g->num_experts = a ? a->num_experts : -1;
    g->max_tokens = a ? a->num_max_dispatch_tokens_per_rank : -1;
    g->num_topk = a && a->topk_idx ? a->topk_idx->shape[1] : -1;
    g->num_tokens = a && a->x ? a->x->shape[0] : -1;
    g->nrows = 0;
}

/* Ranks of other nodes get the signal as a header message (with the data on success). */
static void publish(ts_ep_buffer *b, int half, uint64_t seq, ts_status st, const ts_ep_ll_dispatch_args *a) {
    if (st != TS_OK) {
        ts__ep_ll_sig hdr;
        memset(&hdr, 0, sizeof hdr);
        fill_sig(&hdr, st, a);
        ts__ep_ll_net_send_error(b, half, seq, &hdr);
    }
    for (int d = 0; d < b->num_ranks; d++) {
        if (!ts__ep_is_local(b, d)) continue;
        ts__ep_ll_sig *g = ts__ep_ll_dsig(b, d, half, b->rank);
        fill_sig(g, st, a); /* nrows = 0: read only in headers from other nodes */
        atomic_store_explicit(&g->seq, seq, memory_order_release);
    }
}

ts_status ts_ep_low_latency_dispatch(ts_ep_buffer *b, const ts_ep_ll_dispatch_args *a,
                                     const ts_ep_ll_dispatch_out *o, ts_ep_ll_handle **handle, ts_ep_ll_hook **hook) {
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, LD));
    if (!b->ll) return ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": buf was created without low_latency_mode");
    const uint64_t seq = ++b->ll->seq;
    const int half = (int)(seq & 1);
    ts__ep_ll_dlayout lay;
    ts_ep_ll_handle *h = NULL;
    TS__RETURN_IF_ERROR(ts__ep_ll_net_drain(b, half, LD));
    ts_status st = validate(b, a, o, &h, &lay);
    if (st == TS_OK && a->return_recv_hook && !hook)
        st = ts__fail(TS_ERR_NULL_POINTER, LD ": hook is NULL with return_recv_hook");
    if (st != TS_OK) {
        /* Peers must not wait for this rank: signal the failure instead of data. */
        publish(b, half, seq, st, (st == TS_ERR_NULL_POINTER || !a) ? NULL : a);
        ts_ep_ll_handle_destroy(h);
        return st;
    }
    const int64_t N = h->my_tokens, K = h->my_topk, El = h->El;
    for (int64_t t = 0; t < N; t++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
            if (e >= 0) h->my_expert_counts[e]++;
        }
    /* Block (expert, source) holds T rows: a token listing an expert twice could overflow it. */
    for (int64_t e = 0; e < h->E && st == TS_OK; e++)
        if (h->my_expert_counts[e] > h->T)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT,
                          LD ": topk_idx selects expert %lld %d times, more than num_max_dispatch_tokens_per_rank %lld "
                          "(an expert listed twice in a token's top-k)", (long long)e, h->my_expert_counts[e],
                          (long long)h->T);
    if (st != TS_OK) {
        publish(b, half, seq, st, a);
        ts_ep_ll_handle_destroy(h);
        return st;
    }
    send_ctx sc = {b, a->x, a->topk_idx, N, K, h->hidden, El, h->T, a->use_fp8, a->round_scale, lay, half, 1, 0,
                   ts__ep_ll_cast__generic, NULL, 0};
#ifdef TS_HAVE_AVX2_KERNELS
    if (ts__isa_avx2_up(ts__active_isa())) sc.cast = ts__ep_ll_cast__avx2;
#endif
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) sc.cast = ts__ep_ll_cast__avx512;
#endif
    const int R = b->num_ranks;
    int32_t *nrows = NULL;
    if (b->num_nodes > 1) {
        /* packed index of each token in its message to each rank of another node (token order) */
        int32_t *pos = ts__ep_ll_tmp(b, (size_t)(N * R + R) * sizeof *pos);
        if (!pos) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no memory for the message index");
            publish(b, half, seq, st, a);
            ts_ep_ll_handle_destroy(h);
            return st;
        }
        nrows = pos + N * R;
        memset(nrows, 0, (size_t)R * sizeof *nrows);
        for (int64_t t = 0; t < N; t++) {
            int32_t *pt = pos + t * R;
            for (int d = 0; d < R; d++) pt[d] = -1;
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
                if (e < 0) continue;
                const int d = (int)(e / El);
                if (pt[d] < 0 && !ts__ep_is_local(b, d)) pt[d] = nrows[d]++;
            }
        }
        sc.pos = pos;
        sc.stage_off = ts__ep_ll_stage_off(R, h->T, K, h->hidden);
        /* receives first, so peers' data never waits in MPI's unexpected queue */
        ts__ep_ll_net_post_headers(b, half, seq);
    }
    int nt = ts_get_num_threads();
    if (nt > N / 4) nt = (int)(N / 4 > 0 ? N / 4 : 1);
    sc.nthreads = nt;
    if (N > 0) ts__parallel_run(nt, send_task, &sc);
    if (nrows && !sc.oom) {
        uint8_t *stage = ts__ep_ll_half(b, b->rank, half) + sc.stage_off;
        for (int d = 0; d < R; d++) {
            if (ts__ep_is_local(b, d)) continue;
            ts__ep_ll_sig hdr;
            memset(&hdr, 0, sizeof hdr);
            fill_sig(&hdr, TS_OK, a);
            hdr.nrows = nrows[d];
            const int64_t blk = (int64_t)d * h->T;
            void *data[3] = {stage + lay.ids + blk * K * 4, stage + lay.scales + blk * lay.nsc * 4,
                             stage + lay.rows + blk * lay.row_bytes};
            const int count[3] = {(int)(N * K * 4), (int)(nrows[d] * lay.nsc * 4), (int)(nrows[d] * lay.row_bytes)};
            const MPI_Datatype type[3] = {MPI_BYTE, MPI_BYTE, MPI_BYTE};
            ts__ep_ll_net_send(b, half, seq, d, &hdr, data, count, type);
        }
    }
    if (sc.oom) {
        /* Some rows may be missing: report it to the receivers rather than send garbage. */
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no scratch memory for the FP8 cast");
        publish(b, half, seq, st, a);
        ts_ep_ll_handle_destroy(h);
        return st;
    }
    publish(b, half, seq, TS_OK, a);

    ts_ep_ll_hook *hk = &b->ll->hooks[half];
    drop_hook(hk);
    memset(hk, 0, sizeof *hk);
    hk->buf = b;
    hk->op = TS__EP_LL_DISPATCH;
    hk->seq = seq;
    hk->da = *a;
    hk->recv_x = *o->recv_x;
    if (a->use_fp8) hk->recv_x_scales = *o->recv_x_scales;
    hk->recv_count = *o->recv_count;
    hk->has_cum = a->cumulative_local_expert_recv_stats != NULL;
    hk->has_wait = a->dispatch_wait_recv_cost_stats != NULL;
    if (hk->has_cum) hk->cum_stats = *a->cumulative_local_expert_recv_stats;
    if (hk->has_wait) hk->wait_stats = *a->dispatch_wait_recv_cost_stats;
    hk->h = h;
    hk->armed = true;
    if (a->return_recv_hook) {
        *handle = h;
        *hook = hk;
        return TS_OK;
    }
    hk->armed = false;
    st = ts__ep_ll_dispatch_recv(hk);
    if (st != TS_OK) {
        ts_ep_ll_handle_destroy(h);
        return st;
    }
    *handle = h;
    if (hook) *hook = NULL;
    return TS_OK;
}

/* ---- receive phase ---- */

typedef struct recv_ctx {
    ts_ep_ll_hook *hk;
    const uint8_t *reg;
    ts__ep_ll_dlayout lay;
    int64_t El, T, H;
    const int64_t *ntok; /* [R] tokens of each source */
    int oom;
} recv_ctx;

static void recv_task(void *vctx, int64_t e0, int64_t e1, int tid) {
    recv_ctx *c = vctx;
    ts_ep_ll_hook *hk = c->hk;
    ts_ep_ll_handle *h = hk->h;
    const ts_ep_buffer *b = hk->buf;
    const int R = h->num_ranks;
    const int64_t S = (int64_t)R * c->T, nsc = c->lay.nsc, rb = c->lay.row_bytes, K = c->lay.K;
    const bool fp8 = hk->da.use_fp8, ue8m0 = hk->da.use_ue8m0;
    const int32_t *ids = (const int32_t *)(const void *)(c->reg + c->lay.ids);
    const float *scl = (const float *)(const void *)(c->reg + c->lay.scales);
    const ts_tensor *rx = &hk->recv_x, *rs = &hk->recv_x_scales;
    const int64_t es = fp8 ? 1 : 2;
    const int64_t lo = b->rank * c->El + e0, hi = b->rank * c->El + e1;
    /* One pass over every (source, token, k) in order, acting on this task's experts only:
     * each expert's rows come out in (source, token, k) order. */
    int64_t *cur = ts__scratch(tid, (size_t)(e1 - e0) * sizeof *cur);
    if (!cur) {
        c->oom = 1;
        return;
    }
    for (int64_t el = e0; el < e1; el++) cur[el - e0] = 0;
    const int64_t mlo = (int64_t)b->rank * c->El, mhi = mlo + c->El;
    for (int s = 0; s < R; s++) {
        for (int64_t el = e0; el < e1; el++) h->layout_range[el * R + s] = cur[el - e0] << 32;
        /* a source on another node sent its rows packed: only the tokens that come here */
        const bool packed = !ts__ep_is_local(b, s);
        int64_t next = 0;
        for (int64_t t = 0; t < c->ntok[s]; t++) {
            const int64_t slot = (int64_t)s * c->T + t;
            const int32_t *it = ids + slot * K;
            int64_t at = slot;
            if (packed) {
                bool here = false;
                for (int64_t k = 0; k < K && !here; k++) here = it[k] >= mlo && it[k] < mhi;
                if (!here) continue;
                at = (int64_t)s * c->T + next++;
            }
            for (int64_t k = 0; k < K; k++) {
                if (it[k] < lo || it[k] >= hi) continue;
                const int64_t el = it[k] - b->rank * c->El;
                const int64_t row = cur[el - e0]++;
                memcpy((uint8_t *)rx->data + (el * rx->strides[0] + row * rx->strides[1]) * es,
                       c->reg + c->lay.rows + at * rb, (size_t)rb);
                h->src_info[el * S + row] = (int32_t)t;
                if (!fp8) continue;
                const float *si = scl + at * nsc;
                if (!ue8m0) {
                    float *o = (float *)rs->data + el * rs->strides[0] + row * rs->strides[1];
                    for (int64_t g = 0; g < nsc; g++) o[g * rs->strides[2]] = si[g];
                } else {
                    int32_t *o = (int32_t *)rs->data + el * rs->strides[0] + row * rs->strides[1];
                    for (int64_t w = 0; w < nsc / 4; w++) {
                        uint32_t word = 0;
                        for (int j = 0; j < 4; j++) {
                            union { float f; uint32_t u; } v = {si[4 * w + j]};
                            word |= ((v.u >> 23) & 0xFFu) << (8 * j);
                        }
                        o[w * rs->strides[2]] = (int32_t)word;
                    }
                }
            }
        }
        for (int64_t el = e0; el < e1; el++) {
            const int64_t begin = h->layout_range[el * R + s] >> 32;
            h->layout_range[el * R + s] |= cur[el - e0] - begin;
        }
    }
    for (int64_t el = e0; el < e1; el++) h->recv_count[el] = (int32_t)cur[el - e0];
}

static ts__ep_ll_sig *dsig_of(void *ctx, ts_ep_buffer *b, int p) {
    return ts__ep_ll_dsig(b, b->rank, (int)(((ts_ep_ll_hook *)ctx)->seq & 1), p);
}

/* A source on another node: its header agrees, so post its ids / scales / rows receives
 * straight into its block of this rank's dispatch region. */
static bool post_dispatch(void *ctx, ts_ep_buffer *b, ts__ep_ll_net *n, int p, const ts__ep_ll_sig *g) {
    const ts_ep_ll_hook *hk = ctx;
    const ts_ep_ll_handle *h = hk->h;
    const int flags = sig_flags(&hk->da);
    if (g->hidden != h->hidden || g->max_tokens != h->T || g->num_topk != h->my_topk || g->num_experts != h->E ||
        g->flags != flags || g->num_tokens < 0 || g->num_tokens > h->T || g->nrows < 0 || g->nrows > g->num_tokens)
        return false;
    const ts__ep_ll_dlayout lay = ts__ep_ll_dispatch_layout(b->num_ranks, h->T, h->my_topk, h->hidden, hk->da.use_fp8);
    uint8_t *reg = ts__ep_ll_half(b, b->rank, (int)(hk->seq & 1));
    const int64_t blk = (int64_t)p * h->T, K = h->my_topk;
    void *data[3] = {reg + lay.ids + blk * K * 4, reg + lay.scales + blk * lay.nsc * 4, reg + lay.rows + blk * lay.row_bytes};
    const int count[3] = {(int)(g->num_tokens * K * 4), (int)(g->nrows * lay.nsc * 4), (int)(g->nrows * lay.row_bytes)};
    MPI_Request *q = &n->req[p * TS__EP_LL_REQS];
    for (int i = 0; i < 3; i++)
        if (count[i] > 0) MPI_Irecv(data[i], count[i], MPI_BYTE, p, ts__ep_ll_tag(hk->seq, 1 + i), b->comm, &q[1 + i]);
    return true;
}

ts_status ts__ep_ll_dispatch_recv(ts_ep_ll_hook *hk) {
    ts_ep_buffer *b = hk->buf;
    ts_ep_ll_handle *h = hk->h;
    const int R = b->num_ranks, half = (int)(hk->seq & 1);
    int64_t waited[1024];
    int64_t *wt = R <= 1024 ? waited : calloc((size_t)R, sizeof *wt);
    if (!wt) return ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no memory");
    memset(wt, 0, (size_t)R * sizeof *wt);
    ts_status st = ts__ep_ll_wait_all(b, half, hk->seq, dsig_of, post_dispatch, hk, LD, wt);
    const int flags = sig_flags(&hk->da);
    for (int s = 0; s < R && st == TS_OK; s++) {
        const ts__ep_ll_sig *g = ts__ep_ll_dsig(b, b->rank, half, s);
        if (g->status != TS_OK)
            st = ts__fail(TS_ERR_PEER, LD ": rank %d rejected its arguments (%s)", s, ts_status_str((ts_status)g->status));
        else if (g->hidden != h->hidden || g->max_tokens != h->T)
            st = ts__fail(TS_ERR_SHAPE, LD ": rank %d has hidden %lld / num_max_dispatch_tokens_per_rank %lld, this "
                          "rank %lld / %lld", s, (long long)g->hidden, (long long)g->max_tokens, (long long)h->hidden,
                          (long long)h->T);
        else if (g->num_topk != h->my_topk)
            st = ts__fail(TS_ERR_SHAPE, LD ": rank %d has num_topk %lld, this rank %lld", s, (long long)g->num_topk,
                          (long long)h->my_topk);
        else if (g->num_experts != h->E || g->flags != flags)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, LD ": rank %d has num_experts %lld / fp8 flags %d, this rank %lld / %d",
                          s, (long long)g->num_experts, g->flags, (long long)h->E, flags);
    }
    if (st == TS_OK) {
        int64_t ntok[1024];
        int64_t *nt = R <= 1024 ? ntok : calloc((size_t)R, sizeof *nt);
        if (!nt) {
            if (wt != waited) free(wt);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no memory");
        }
        for (int s = 0; s < R; s++) nt[s] = ts__ep_ll_dsig(b, b->rank, half, s)->num_tokens;
        recv_ctx rc = {hk, ts__ep_ll_half(b, b->rank, half),
                       ts__ep_ll_dispatch_layout(R, h->T, h->my_topk, h->hidden, hk->da.use_fp8), h->El, h->T, h->hidden,
                       nt, 0};
        /* a few experts per task: each task scans every source's top-k rows once */
        ts__parallel_for(h->El, (h->El + 1) / 2 > 0 ? (h->El + 1) / 2 : 1, recv_task, &rc);
        if (nt != ntok) free(nt);
        if (rc.oom) {
            if (wt != waited) free(wt);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, LD ": no scratch memory");
        }
        int32_t *rcnt = hk->recv_count.data;
        for (int64_t el = 0; el < h->El; el++) rcnt[el * hk->recv_count.strides[0]] = h->recv_count[el];
        if (hk->has_cum) {
            int32_t *cs = hk->cum_stats.data;
            for (int64_t el = 0; el < h->El; el++) cs[el * hk->cum_stats.strides[0]] += h->recv_count[el];
        }
        h->received = true;
    }
    if (hk->has_wait && st != TS_ERR_PEER && st != TS_ERR_SHAPE && st != TS_ERR_INVALID_ARGUMENT) {
        int64_t *ws = hk->wait_stats.data;
        for (int s = 0; s < R; s++) ws[s * hk->wait_stats.strides[0]] += wt[s];
    }
    if (wt != waited) free(wt);
    return st;
}
