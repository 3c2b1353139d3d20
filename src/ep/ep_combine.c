/* Normal-mode combine over shared memory: each rank stages its expert outputs in its own
 * combine area (skipped when they already live there), then every source rank pulls the
 * copies of its tokens and reduces them in f32 in ascending rank order. */
#include "ep/ep_internal.h"
#include "ep/ep_kernels.h"

#include <string.h>

#define C "ts_ep_combine"

/* Copies of a token gathered into a stack table for communicators up to this size. */
#define TS__EP_MAX_RANKS_FAST 256

static ts_status check_bf16_2d(const ts_tensor *t, const char *name, int64_t rows_min, int64_t rows_exact,
                               int64_t cols, ts_dtype dt) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, dt));
    if (t->ndim != 2) return ts__fail(TS_ERR_SHAPE, "%s must be 2-D", name);
    if (t->shape[1] != cols)
        return ts__fail(TS_ERR_SHAPE, "%s has %lld columns, expected %lld", name, (long long)t->shape[1], (long long)cols);
    if (rows_exact >= 0 && t->shape[0] != rows_exact)
        return ts__fail(TS_ERR_SHAPE, "%s has %lld rows, expected %lld", name, (long long)t->shape[0],
                        (long long)rows_exact);
    if (t->shape[0] < rows_min)
        return ts__fail(TS_ERR_SHAPE, "%s has %lld rows, needs at least %lld", name, (long long)t->shape[0],
                        (long long)rows_min);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(t, name));
    return TS_OK;
}

typedef struct comb_layout {
    int64_t x_off, w_off, total;
} comb_layout;

static comb_layout comb_layout_of(int64_t rows, int64_t hidden, int64_t K) {
    comb_layout l;
    l.x_off = 0;
    l.w_off = ts__align(rows * hidden * 2, 64);
    l.total = l.w_off + ts__align(rows * K * 4, 64);
    return l;
}

typedef struct stage_ctx {
    const ts_tensor *x, *w;
    uint8_t *area;
    comb_layout l;
    int64_t rows, hidden, K;
    int nthreads;
} stage_ctx;

static void stage_task(void *vc, int tid, int nthreads) {
    const stage_ctx *c = vc;
    const int64_t r0 = c->rows * tid / nthreads, r1 = c->rows * (tid + 1) / nthreads;
    const uint16_t *x = c->x->data;
    uint16_t *dx = (uint16_t *)(void *)(c->area + c->l.x_off);
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *src = x + r * c->x->strides[0];
        if (src != dx + r * c->hidden) ts__ep_copy_row((uint8_t *)(dx + r * c->hidden), (const uint8_t *)src, c->hidden * 2);
    }
    ts__ep_copy_fence();
    if (c->w) {
        const float *w = c->w->data;
        float *dw = (float *)(void *)(c->area + c->l.w_off);
        for (int64_t r = r0; r < r1; r++)
            for (int64_t k = 0; k < c->K; k++) dw[r * c->K + k] = w[r * c->w->strides[0] + k * c->w->strides[1]];
    }
}

typedef struct reduce_ctx {
    const ts_ep_buffer *b;
    const ts_ep_handle *h;
    const comb_layout *lay; /* [R] */
    const ts_tensor *bias0, *bias1, *out, *out_w;
    int64_t hidden, K;
    bool has_w;
    int nthreads;
    _Atomic int oom;
    ts__ep_acc_bf16_fn acc;
    ts__ep_store_bf16_fn store;
    /* internode: copies from other nodes' ranks arrived in rstage + roff[node] (cr bytes each) */
    const uint8_t *rstage;
    const int64_t *roff;
    int64_t cr;
} reduce_ctx;

/* The copy of token t that rank r returns (its bf16 row; its weights follow at w). */
static inline const uint16_t *copy_row(const reduce_ctx *c, int64_t t, int r, int32_t row, const float **w) {
    const ts_ep_buffer *b = c->b;
    if (b->peer[r]) {
        const uint8_t *area = ts__ep_combine_area(b, r);
        if (w) *w = (const float *)(const void *)(area + c->lay[r].w_off) + (int64_t)row * c->K;
        return (const uint16_t *)(const void *)(area + c->lay[r].x_off) + (int64_t)row * c->hidden;
    }
    const uint8_t *p = c->rstage + c->roff[r / b->ranks_per_node] +
                       (int64_t)c->h->copy_idx[t * b->num_ranks + r] * c->cr;
    if (w) *w = (const float *)(const void *)(p + 2 * c->hidden);
    return (const uint16_t *)(const void *)p;
}

/* Column chunk of the accumulator: stays in L1 while every copy of the token is added. */
#define TS__EP_COMBINE_CHUNK 1024

static void reduce_task(void *vc, int tid, int nthreads) {
    const reduce_ctx *c = vc;
    const ts_ep_buffer *b = c->b;
    const int R = b->num_ranks;
    const int64_t N = c->h->num_tokens, H = c->hidden;
    const int64_t t0 = N * tid / nthreads, t1 = N * (tid + 1) / nthreads;
    float *acc = ts__scratch(tid, TS__EP_COMBINE_CHUNK * sizeof(float));
    if (!acc) {
        atomic_store(&((reduce_ctx *)vc)->oom, 1);
        return;
    }
    const ts_tensor *bias[2] = {c->bias0, c->bias1};
    const uint16_t *src[TS__EP_MAX_RANKS_FAST];
    for (int64_t t = t0; t < t1; t++) {
        /* Rows of this token's copies, ascending rank (the summation order). */
        int ncopies = 0;
        const uint16_t *const *rows = src;
        for (int r = 0; r < R && r < TS__EP_MAX_RANKS_FAST; r++) {
            const int32_t row = c->h->send_pos[t * R + r];
            if (row >= 0) src[ncopies++] = copy_row(c, t, r, row, NULL);
        }
        uint16_t *o = (uint16_t *)c->out->data + t * c->out->strides[0];
        for (int64_t j0 = 0; j0 < H; j0 += TS__EP_COMBINE_CHUNK) {
            const int64_t n = H - j0 < TS__EP_COMBINE_CHUNK ? H - j0 : TS__EP_COMBINE_CHUNK;
            int first = 1; /* the first term initialises: 0 + term, no separate zeroing pass */
            for (int i = 0; i < 2; i++)
                if (bias[i]) {
                    c->acc(acc, (const uint16_t *)bias[i]->data + t * bias[i]->strides[0] + j0, n, first);
                    first = 0;
                }
            for (int i = 0; i < ncopies; i++) {
                c->acc(acc, rows[i] + j0, n, first);
                first = 0;
            }
            /* ranks beyond the fast table (rare): same order, looked up per chunk */
            for (int r = TS__EP_MAX_RANKS_FAST; r < R; r++) {
                const int32_t row = c->h->send_pos[t * R + r];
                if (row < 0) continue;
                c->acc(acc, copy_row(c, t, r, row, NULL) + j0, n, first);
                first = 0;
            }
            if (first) memset(o + j0, 0, (size_t)n * sizeof *o); /* nothing to add: +0 */
            else c->store(o + j0, acc, n);
        }
        if (c->has_w) {
            float *ow = (float *)c->out_w->data;
            for (int64_t k = 0; k < c->K; k++) {
                float s = 0.0f;
                for (int r = 0; r < R; r++) {
                    const int32_t row = c->h->send_pos[t * R + r];
                    if (row < 0) continue;
                    const float *w;
                    copy_row(c, t, r, row, &w);
                    s += w[k];
                }
                ow[t * c->out_w->strides[0] + k * c->out_w->strides[1]] = s;
            }
        }
    }
}

/* Proxy side: the copies this node's ranks hold of the tokens forwarded for sources on other
 * nodes, packed in the sources' token order (then rank order) into the send staging. */
typedef struct fwd_ctx {
    const ts_ep_buffer *b;
    const ts_ep_handle *h;
    const comb_layout *lay;
    int64_t hidden, K, cr;
    bool has_w;
} fwd_ctx;

static void fwd_task(void *vc, int tid, int nthreads) {
    const fwd_ctx *c = vc;
    const ts_ep_buffer *b = c->b;
    const int k = b->ranks_per_node;
    const int64_t nrec = c->h->fwd_rec[b->num_ranks];
    const int64_t i0 = nrec * tid / nthreads, i1 = nrec * (tid + 1) / nthreads;
    for (int64_t i = i0; i < i1; i++) {
        uint8_t *p = b->rdma + c->h->fwd_copy[i] * c->cr;
        for (int j = 0; j < k; j++) {
            const int32_t row = c->h->fwd_rows[i * k + j];
            if (row < 0) continue;
            const int d = b->node_first + j;
            const uint8_t *area = ts__ep_combine_area(b, d);
            ts__ep_copy_row(p, area + c->lay[d].x_off + (int64_t)row * c->hidden * 2, c->hidden * 2);
            if (c->has_w)
                memcpy(p + 2 * c->hidden, area + c->lay[d].w_off + (int64_t)row * c->K * 4, (size_t)c->K * 4);
            p += c->cr;
        }
    }
    ts__ep_copy_fence();
}

/* Copies rank s's tokens have on node n (rows s sent to n's ranks). */
static int64_t node_copies(const ts_ep_buffer *b, const ts_ep_handle *h, int s, int n) {
    int64_t c = 0;
    for (int j = 0; j < b->ranks_per_node; j++) c += h->counts[(int64_t)s * b->num_ranks + n * b->ranks_per_node + j];
    return c;
}

/* Internode combine traffic: post the receives of this rank's remote copies, pack and send the
 * copies this rank forwards as a proxy, and wait until the receives are in. */
static ts_status internode_combine(ts_ep_buffer *b, const ts_ep_handle *h, const comb_layout *lay, int64_t H,
                                   int64_t K, bool has_w, int64_t cr, int64_t *roff, int nt) {
    const int R = b->num_ranks, k = b->ranks_per_node, nodes = b->num_nodes;
    for (int q = 0; q < R; q++) {
        const int nq = q / k, lq = q % k;
        int64_t send = 0, recv = 0, biggest = 0;
        for (int n = 0; n < nodes; n++) {
            if (n == nq) continue;
            const int64_t so = node_copies(b, h, n * k + lq, nq) * cr, ri = node_copies(b, h, q, n) * cr;
            send += so;
            recv += ri;
            biggest = ts__max64(biggest, ts__max64(so, ri));
        }
        if (send > b->rdma_half || recv > b->rdma_half || biggest > INT32_MAX)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            C ": rank %d would stage %lld bytes to forward and %lld to receive from other nodes, "
                            "more than half of num_rdma_bytes (%lld) holds (or one message > 2 GiB); see "
                            "ts_ep_get_internode_buffer_size_hint",
                            q, (long long)send, (long long)recv, (long long)b->rdma_half);
    }
    b->nreqs = 0;
    int64_t off = 0;
    b->data_phase = true;
    for (int n = 0; n < nodes; n++) {
        roff[n] = off;
        const int64_t cnt = n == b->node ? 0 : node_copies(b, h, b->rank, n);
        if (cnt > 0) {
            MPI_Request q;
            const int p = n * k + b->local_rank;
            MPI_Irecv(b->rdma + b->rdma_half + off, (int)(cnt * cr), MPI_BYTE, p, TS__EP_TAG_COMBINE, b->comm, &q);
            ts__ep_req_push(b, q, p);
        }
        off += cnt * cr;
    }
    const int64_t nrec = h->fwd_rec[R];
    fwd_ctx fc = {b, h, lay, H, K, cr, has_w};
    int fnt = nt;
    if (fnt > nrec / 8) fnt = nrec / 8 > 0 ? (int)(nrec / 8) : 1;
    if (nrec > 0) ts__parallel_run(fnt, fwd_task, &fc);
    for (int s = 0; s < R; s++) {
        const int64_t c0 = h->fwd_copy[h->fwd_rec[s]], c1 = h->fwd_copy[h->fwd_rec[s + 1]];
        if (c1 > c0) {
            MPI_Request q;
            MPI_Isend(b->rdma + c0 * cr, (int)((c1 - c0) * cr), MPI_BYTE, s, TS__EP_TAG_COMBINE, b->comm, &q);
            ts__ep_req_push(b, q, s);
        }
    }
    return ts__ep_wait_reqs(b, C);
}

ts_status ts_ep_combine(ts_ep_buffer *b, const ts_ep_handle *h, const ts_tensor *x, const ts_tensor *topk_weights,
                        const ts_tensor *bias0, const ts_tensor *bias1, const ts_ep_config *config,
                        ts_tensor *combined_x, ts_tensor *combined_topk_weights) {
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, C));
    const int R = b->num_ranks, me = b->rank;
    const uint64_t call = b->calls++;
    ts__ep_meta *m = ts__ep_meta_of(b, me, call);
    memset(m, 0, sizeof *m);
    m->op = TS__EP_OP_COMBINE;
    ts_status st = TS_OK;
    int64_t H = 0, K = 0, N = 0, nrecv = 0;
    if (!h) st = ts__fail(TS_ERR_NULL_POINTER, C ": handle is NULL");
    else if (h->buf != b) st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": handle belongs to another buffer");
    if (st == TS_OK) {
        N = h->num_tokens;
        nrecv = h->num_recv;
        st = ts_tensor_check(x, C ": x");
        if (st == TS_OK && x->ndim != 2) st = ts__fail(TS_ERR_SHAPE, C ": x must be 2-D [num_recv_tokens, hidden]");
        if (st == TS_OK) {
            H = x->shape[1];
            st = check_bf16_2d(x, C ": x", nrecv, -1, H, TS_BF16);
        }
        if (st == TS_OK && H < 1) st = ts__fail(TS_ERR_SHAPE, C ": x: hidden must be >= 1");
    }
    if (st == TS_OK && topk_weights) {
        st = ts_tensor_check(topk_weights, C ": topk_weights");
        if (st == TS_OK && topk_weights->ndim != 2) st = ts__fail(TS_ERR_SHAPE, C ": topk_weights must be 2-D");
        if (st == TS_OK) {
            K = topk_weights->shape[1];
            st = check_bf16_2d(topk_weights, C ": topk_weights", nrecv, -1, K, TS_F32);
        }
        if (st == TS_OK && (K < 1 || K > 1024)) st = ts__fail(TS_ERR_SHAPE, C ": topk_weights: num_topk %lld", (long long)K);
        if (st == TS_OK && !combined_topk_weights)
            st = ts__fail(TS_ERR_NULL_POINTER, C ": combined_topk_weights is required with topk_weights");
        if (st == TS_OK) st = check_bf16_2d(combined_topk_weights, C ": combined_topk_weights", 0, N, K, TS_F32);
    }
    if (st == TS_OK && !topk_weights && combined_topk_weights)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": combined_topk_weights given without topk_weights");
    if (st == TS_OK && bias0) st = check_bf16_2d(bias0, C ": bias0", 0, N, H, TS_BF16);
    if (st == TS_OK && bias1) st = check_bf16_2d(bias1, C ": bias1", 0, N, H, TS_BF16);
    if (st == TS_OK && !combined_x) st = ts__fail(TS_ERR_NULL_POINTER, C ": combined_x is NULL");
    if (st == TS_OK) st = check_bf16_2d(combined_x, C ": combined_x", 0, N, H, TS_BF16);
    if (st == TS_OK && config && config->num_max_nvl_chunked_send_tokens < 1)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": config chunk sizes must be >= 1");
    comb_layout ml = comb_layout_of(nrecv, H, K);
    if (st == TS_OK && ml.total > ts__ep_area_bytes(b))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": %lld rows of %lld bf16 need %lld bytes, more than half of "
                      "num_nvl_bytes (%lld) holds", (long long)nrecv, (long long)H, (long long)ml.total,
                      (long long)ts__ep_area_bytes(b));
    int nt = ts__ep_threads(config);
    if (st == TS_OK) {
        /* The combine area is free: the previous combine ended with a barrier and dispatch
         * never writes it. */
        stage_ctx sc = {x, topk_weights, ts__ep_combine_area(b, me), ml, nrecv, H, K, 1};
        int snt = nt;
        if (snt > nrecv / 8) snt = nrecv / 8 > 0 ? (int)(nrecv / 8) : 1;
        if (nrecv > 0) ts__parallel_run(snt, stage_task, &sc);
        m->hidden = H;
        m->has_weights = topk_weights != NULL;
        m->num_topk = K;
        m->num_recv = nrecv;
        m->x_dtype = TS_BF16;
    }
    m->status = st;
    TS__RETURN_IF_ERROR(ts__ep_exchange_meta(b, call, (int64_t)sizeof *m, C));
    TS__RETURN_IF_ERROR(ts__ep_check_peers(b, call, C));

    _Static_assert(sizeof(comb_layout) + sizeof(int64_t) <= TS__EP_RANK_BOOK_BYTES,
                   "combine bookkeeping outgrew the buffer's per-rank block");
    comb_layout *lay = (comb_layout *)(void *)b->rank_book;
    for (int r = 0; r < R; r++) lay[r] = comb_layout_of(ts__ep_meta_of(b, r, call)->num_recv, H, K);
    const int64_t cr = ts__align(2 * H + (topk_weights ? 4 * K : 0), 16);
    int64_t *roff = (int64_t *)(void *)(lay + R);
    if (b->num_nodes > 1) TS__RETURN_IF_ERROR(internode_combine(b, h, lay, H, K, topk_weights != NULL, cr, roff, nt));
    reduce_ctx rc = {b, h, lay, bias0, bias1, combined_x, combined_topk_weights, H, K, topk_weights != NULL, 1, 0,
                     ts__ep_acc_bf16__generic, ts__ep_store_bf16__generic, b->rdma + b->rdma_half, roff, cr};
#ifdef TS_HAVE_AVX2_KERNELS
    if (ts__isa_avx2_up(ts__active_isa())) {
        rc.acc = ts__ep_acc_bf16__avx2;
        rc.store = ts__ep_store_bf16__avx2;
    }
#endif
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) {
        rc.acc = ts__ep_acc_bf16__avx512;
        rc.store = ts__ep_store_bf16__avx512;
    }
#endif
    int rnt = nt;
    if (rnt > N / 4) rnt = N / 4 > 0 ? (int)(N / 4) : 1;
    if (N > 0) ts__parallel_run(rnt, reduce_task, &rc);
    /* Nobody may restage a combine area while a peer still reads it (only ranks of its own
     * node read it: other nodes got their copies through the proxy). */
    TS__RETURN_IF_ERROR(ts__ep_node_barrier(b, C));
    if (atomic_load(&rc.oom))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, C ": no scratch for a %lld-float accumulator", (long long)H);
    return TS_OK;
}

ts_status ts_ep_get_combine_buffer(ts_ep_buffer *b, const ts_ep_handle *h, int64_t hidden, ts_tensor *x) {
    static const char *what = "ts_ep_get_combine_buffer";
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, what));
    if (!h || !x) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", what, h ? "x" : "handle");
    if (h->buf != b) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: handle belongs to another buffer", what);
    if (hidden < 1 || hidden > (INT64_C(1) << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: hidden %lld out of range", what, (long long)hidden);
    const comb_layout l = comb_layout_of(h->num_recv, hidden, 0);
    if (l.total > ts__ep_area_bytes(b))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %lld rows of %lld bf16 exceed half of num_nvl_bytes", what,
                        (long long)h->num_recv, (long long)hidden);
    *x = ts_tensor_2d(ts__ep_combine_area(b, b->rank) + l.x_off, TS_BF16, h->num_recv, hidden);
    return TS_OK;
}
