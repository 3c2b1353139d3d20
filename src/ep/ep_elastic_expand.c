/* The local half of V2's expanded layout: planning which expanded row every (received token,
 * top-k slot) gets (the senders place rows by the same rule, ts__ep_dispatch_expanded), the
 * padding, the copy into those rows after a V1 dispatch where the senders could not place
 * them, and the per-token reduction before a V1 combine. Everything here is a pure function of the received rows, so it gives
 * the same bits for any thread count (threads split rows, never a sum). */
#include "ep/ep_elastic_internal.h"
#include "ep/ep_ll_kernels.h"
#include "tilestack/numerics.h"

#include <string.h>

void ts__ep_elastic_plan(ts_ep_elastic_handle *h, const ts_tensor *recv_idx) {
    const int64_t El = h->num_experts / h->num_ranks, K = h->num_topk, n = h->num_recv, A = h->expert_alignment;
    const int64_t mcols = 2 + K;
    for (int64_t e = 0; e < El; e++) h->unaligned[e] = 0;
    for (int64_t i = 0; i < n && recv_idx && recv_idx->data; i++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t v = ts__ep_idx_at(recv_idx, i, k);
            if (v >= 0 && v < El) h->unaligned[v]++;
        }
    int64_t start = 0;
    for (int64_t e = 0; e < El; e++) {
        h->counts_list[e] = (int32_t)ts__align(h->unaligned[e], A);
        h->psum_expert[e] = (int32_t)start; /* the cursor of e's next row while assigning */
        start += h->counts_list[e];
    }
    if (!h->do_expand) {
        for (int64_t e = 0; e < El; e++) h->psum_expert[e] += h->counts_list[e];
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < K; k++) h->meta[i * mcols + 2 + k] = -1;
        h->num_expanded = n;
        return;
    }
    /* Slots in (received row, k) order: inside an expert that is V1's (source rank, source
     * token) order, so the expanded layout inherits its determinism. */
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t v = recv_idx && recv_idx->data ? ts__ep_idx_at(recv_idx, i, k) : -1;
            h->meta[i * mcols + 2 + k] = v >= 0 && v < El ? h->psum_expert[v]++ : -1;
        }
    /* Each cursor now stands at its aligned start + real count: upstream's expanded psum. */
    h->num_expanded = start;
}

typedef struct expand_ctx {
    const ts_ep_elastic_handle *h;
    const ts__ep_elastic_expand_io *io;
    int64_t xrow, srow;
} expand_ctx;

/* Padding rows of local experts [elo, ehi). */
static void pad_experts(const ts_ep_elastic_handle *h, const ts__ep_elastic_expand_io *io, int64_t xrow, int64_t srow,
                        int64_t elo, int64_t ehi) {
    int64_t start = 0;
    for (int64_t e = 0; e < elo; e++) start += h->counts_list[e];
    for (int64_t e = elo; e < ehi; e++) {
        const int64_t end = start + h->counts_list[e];
        for (int64_t r = start + h->unaligned[e]; r < end; r++) {
            if (io->ew) io->ew[r] = 0.0f;
            if (io->zero_padding) {
                memset(io->ex + r * xrow, 0, (size_t)xrow);
                if (io->esf) memset(io->esf + r * srow, 0, (size_t)srow);
            }
        }
        start = end;
    }
}

void ts__ep_elastic_pad(const ts_ep_elastic_handle *h, const ts__ep_elastic_expand_io *io, int64_t xrow, int64_t srow) {
    pad_experts(h, io, xrow, srow, 0, h->num_experts / h->num_ranks);
}

static void expand_task(void *vc, int tid, int nt) {
    const expand_ctx *c = vc;
    const ts_ep_elastic_handle *h = c->h;
    const ts__ep_elastic_expand_io *io = c->io;
    const int64_t K = h->num_topk, n = h->num_recv, mcols = 2 + K;
    const int64_t lo = n * tid / nt, hi = n * (tid + 1) / nt;
    const uint8_t *x = io->x->data;
    const uint8_t *sf = io->sf ? io->sf->data : NULL;
    const float *w = io->w ? io->w->data : NULL;
    const int64_t xstride = io->x->strides[0] * (int64_t)ts_dtype_size(io->x->dtype);
    for (int64_t i = lo; i < hi; i++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t s = h->meta[i * mcols + 2 + k];
            if (s < 0) continue;
            memcpy(io->ex + s * c->xrow, x + i * xstride, (size_t)c->xrow);
            if (sf && io->esf) memcpy(io->esf + s * c->srow, sf + i * c->srow, (size_t)c->srow);
            if (io->ew) io->ew[s] = w ? w[i * K + k] : 0.0f;
        }
    /* Padding rows of the experts this task owns. */
    const int64_t El = h->num_experts / h->num_ranks;
    pad_experts(h, io, c->xrow, c->srow, El * tid / nt, El * (tid + 1) / nt);
}

void ts__ep_elastic_expand(const ts_ep_elastic_handle *h, const ts__ep_elastic_expand_io *io, int nthreads) {
    expand_ctx c = {h, io, io->x->shape[1] * (int64_t)ts_dtype_size(io->x->dtype),
                    io->sf ? io->sf->shape[1] * (int64_t)ts_dtype_size(io->sf->dtype) : 0};
    const int64_t work = h->num_recv > 0 ? h->num_recv : 1;
    if (nthreads > work) nthreads = (int)work;
    ts__parallel_run(nthreads < 1 ? 1 : nthreads, expand_task, &c);
}

typedef struct reduce_ctx {
    const ts_ep_elastic_handle *h;
    const ts_tensor *x, *w;
    uint16_t *y;
    float *yw;
    ts__ep_ll_row_kernels k;
} reduce_ctx;

enum { CHUNK = 256 };

static void reduce_task(void *vc, int tid, int nt) {
    const reduce_ctx *c = vc;
    const ts_ep_elastic_handle *h = c->h;
    const int64_t K = h->num_topk, n = h->num_recv, mcols = 2 + K, H = c->x->shape[1];
    const int64_t lo = n * tid / nt, hi = n * (tid + 1) / nt;
    const uint16_t *x = c->x->data;
    const float *w = c->w ? c->w->data : NULL;
    const int64_t ws = c->w ? c->w->strides[0] : 0;
    float acc[CHUNK];
    for (int64_t i = lo; i < hi; i++) {
        const int32_t *slot = h->meta + i * mcols + 2;
        for (int64_t j0 = 0; j0 < H; j0 += CHUNK) {
            const int64_t m = H - j0 < CHUNK ? H - j0 : CHUNK;
            for (int64_t j = 0; j < m; j++) acc[j] = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                if (slot[k] < 0) continue;
                const float wk = w ? w[slot[k] * ws] : 1.0f;
                c->k.fma_bf16(acc, x + slot[k] * c->x->strides[0] + j0, wk, m);
            }
            c->k.store(c->y + i * H + j0, acc, m);
        }
        if (c->yw)
            for (int64_t k = 0; k < K; k++) c->yw[i * K + k] = slot[k] >= 0 && w ? w[slot[k] * ws] : 0.0f;
    }
}

void ts__ep_elastic_reduce(const ts_ep_elastic_handle *h, const ts_tensor *x, const ts_tensor *w, uint16_t *y,
                           float *yw, int nthreads) {
    /* the low-latency combine's row kernels (bit-identical on every path) */
    reduce_ctx c = {h, x, w, y, yw, ts__ep_ll_pick_row_kernels()};
    const int64_t work = h->num_recv > 0 ? h->num_recv : 1;
    if (nthreads > work) nthreads = (int)work;
    ts__parallel_run(nthreads < 1 ? 1 : nthreads, reduce_task, &c);
}
