/* Low-latency combine (upstream low_latency_combine): the expert rank stages its outputs (or
 * finds them already in place, zero_copy) in its own half, optionally LogFMT-10 encoded, and
 * raises its signal; each source rank then pulls the rows of its tokens from the expert ranks
 * and reduces them with the top-k weights in top-k order. Also the LogFMT-10 codec. */
#include "ep/ep_low_latency.h"
#include "ep/ep_kernels.h"
#include "ep/ep_ll_kernels.h"

#include <math.h>

#define LC "ts_ep_low_latency_combine"

/* ---- LogFMT-10 (upstream's logfmt_encode / decode_and_accumulate, per 128 channels) ----
 * Upstream uses the GPU's lg2.approx / ex2.approx; here libm's log2f / exp2f, and fmaf where
 * nvcc contracts a multiply-add (its default). Codes can therefore differ from a GPU's by the
 * approximations' last bits; the format and rounding rule are upstream's. */

static int logfmt_params(float amax, float amin, float *log_amax, float *log_amin, float *step) {
    *log_amax = log2f(amax);
    /* amin == 0: log2f gives -inf, so both sides of upstream's check agree on log_amax - 32 */
    *log_amin = amin == 0.0f ? *log_amax - 32.0f : fmaxf(log2f(amin), *log_amax - 32.0f);
    const int cast = *log_amax < 0.0f && *log_amin < *log_amax;
    *step = (*log_amax - *log_amin) / 510.0f;
    return cast;
}

int ts_ep_logfmt10_encode(const uint16_t *x, uint8_t *enc, uint16_t meta[2]) {
    float amax = 0.0f, amin = INFINITY;
    for (int j = 0; j < 128; j++) {
        const float a = ts__ep_bf16f((uint16_t)(x[j] & 0x7FFF));
        amax = fmaxf(amax, a);
        amin = fminf(amin, a);
    }
    /* amax/amin are |bf16| values, so these narrowings are exact */
    meta[0] = (uint16_t)(((union { float f; uint32_t u; }){amax}).u >> 16);
    meta[1] = (uint16_t)(((union { float f; uint32_t u; }){amin}).u >> 16);
    float log_amax, log_amin, step;
    if (!logfmt_params(amax, amin, &log_amax, &log_amin, &step)) {
        if ((const uint8_t *)x != enc) memmove(enc, x, 256);
        return 256;
    }
    const float step_inv = 1.0f / step;
    /* Rounds in the linear domain: the threshold between two codes is their arithmetic mean. */
    const float rounding = fmaf(-log2f((1.0f + exp2f(step)) * 0.5f), step_inv, 2.0f);
    const float fused = fmaf(-log_amin, step_inv, rounding);
    uint32_t words[40];
    for (int g = 0; g < 8; g++) {
        uint32_t code[16], signs = 0;
        for (int j = 0; j < 16; j++) {
            const uint16_t v = x[g * 16 + j];
            signs |= (uint32_t)(v >> 15) << j;
            const float a = ts__ep_bf16f((uint16_t)(v & 0x7FFF));
            const float f = fmaxf(fmaf(log2f(a), step_inv, fused), 0.0f);
            code[j] = (uint32_t)f; /* round down, as __float2uint_rd */
            if (code[j] > 511) code[j] = 511;
        }
        uint32_t *w = words + g * 5;
        memset(w, 0, 5 * sizeof *w);
        for (int j = 0; j < 16; j++) {
            const int bit = 9 * j;
            w[bit / 32] |= code[j] << (bit % 32);
            if (bit % 32 > 23) w[bit / 32 + 1] |= code[j] >> (32 - bit % 32);
        }
        w[4] |= signs << 16;
    }
    memcpy(enc, words, 160); /* x may alias enc: words were built from x first */
    return 160;
}

void ts_ep_logfmt10_decode(const uint8_t *enc, const uint16_t meta[2], float *y) {
    const float amax = ts__ep_bf16f(meta[0]), amin = ts__ep_bf16f(meta[1]);
    float log_amax, log_amin, step;
    if (!logfmt_params(amax, amin, &log_amax, &log_amin, &step)) {
        for (int j = 0; j < 128; j++) {
            uint16_t v;
            memcpy(&v, enc + 2 * j, 2);
            y[j] = ts__ep_bf16f(v);
        }
        return;
    }
    for (int g = 0; g < 8; g++) {
        uint32_t w[5];
        memcpy(w, enc + g * 20, 20);
        const uint32_t signs = w[4] >> 16;
        for (int j = 0; j < 16; j++) {
            const int bit = 9 * j;
            uint64_t two = (uint64_t)w[bit / 32] | (bit / 32 < 4 ? (uint64_t)w[bit / 32 + 1] << 32 : 0);
            const uint32_t c = (uint32_t)(two >> (bit % 32)) & 0x1FF;
            const float d = c == 0 ? 0.0f : exp2f(fmaf((float)(c - 1), step, log_amin));
            y[g * 16 + j] = (signs >> j) & 1 ? -d : d;
        }
    }
}

/* ---- combine ---- */

/* Rows this rank receives from expert rank d (its selections of d's experts). */
static int64_t rows_from(const ts_ep_ll_handle *h, int d) {
    int64_t n = 0;
    for (int64_t el = 0; el < h->El; el++) n += h->my_expert_counts[d * h->El + el];
    return n;
}

/* Offset in the combine staging of the rows from remote rank `upto` (-1: the total):
 * remote ranks ascending, each [rows bf16 | logfmt meta u32 per 128 values]. */
static int64_t recv_stage_bytes(const ts_ep_buffer *b, const ts_ep_ll_handle *h, bool logfmt, int upto) {
    const int64_t per_row = 2 * h->hidden + (logfmt ? h->hidden / 128 * 4 : 0);
    int64_t off = 0;
    for (int d = 0; d < b->num_ranks && d != upto; d++)
        if (!ts__ep_is_local(b, d)) off += ts__align(rows_from(h, d) * per_row, 64);
    return off;
}

static ts_status validate(ts_ep_buffer *b, const ts_ep_ll_combine_args *a, const ts_tensor *out, int32_t **slot_out) {
    if (!b->ll) return ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": buf was created without low_latency_mode");
    if (!a || !out) return ts__fail(TS_ERR_NULL_POINTER, LC ": %s is NULL", !a ? "args" : "out");
    const ts_ep_ll_handle *h = a->handle;
    if (!h) return ts__fail(TS_ERR_NULL_POINTER, LC ": handle is NULL");
    if (h->buf != b) return ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": handle belongs to another buffer");
    if (!h->received) return ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": the handle's dispatch was not received (run its hook)");
    const int R = b->num_ranks;
    const int64_t S = (int64_t)R * h->T, H = h->hidden;
    if (!a->zero_copy) {
        TS__RETURN_IF_ERROR(ts_tensor_check(a->x, LC ": x"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->x, LC ": x", TS_BF16));
        const int64_t sh[3] = {h->El, S, H};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(a->x, LC ": x", 3, sh));
        TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(a->x, LC ": x"));
    }
    TS__RETURN_IF_ERROR(ts__ep_check_topk_idx(a->topk_idx, h->E, LC));
    const int64_t N = a->topk_idx->shape[0], K = a->topk_idx->shape[1];
    TS__RETURN_IF_ERROR(ts_tensor_check(a->topk_weights, LC ": topk_weights"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->topk_weights, LC ": topk_weights", TS_F32));
    const int64_t shw[2] = {N, K};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(a->topk_weights, LC ": topk_weights", 2, shw));
    TS__RETURN_IF_ERROR(ts_tensor_check(out, LC ": out"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(out, LC ": out", TS_BF16));
    const int64_t sho[2] = {N, H};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(out, LC ": out", 2, sho));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(out, LC ": out"));
    if (a->combine_wait_recv_cost_stats) {
        const ts_tensor *t = a->combine_wait_recv_cost_stats;
        TS__RETURN_IF_ERROR(ts_tensor_check(t, LC ": combine_wait_recv_cost_stats"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, LC ": combine_wait_recv_cost_stats", TS_I64));
        const int64_t shs[1] = {R};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(t, LC ": combine_wait_recv_cost_stats", 1, shs));
    }
    if (N != h->my_tokens || K != h->my_topk)
        return ts__fail(TS_ERR_SHAPE, LC ": topk_idx is [%lld, %lld], this rank dispatched [%lld, %lld]", (long long)N,
                        (long long)K, (long long)h->my_tokens, (long long)h->my_topk);
    const int64_t ctot = ts__ep_ll_combine_layout(h->El, R, h->T, H).total;
    if (ctot > b->ll->half_bytes)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": num_rdma_bytes is too small for this combine");
    if (b->num_nodes > 1) {
        /* rows from experts on other nodes are staged in front of the combine region */
        const int64_t room = ts__ep_ll_comb_off(b, ctot);
        const int64_t need = ts__ep_ll_stage_off(R, h->T, h->my_topk, H) + recv_stage_bytes(b, h, a->use_logfmt, -1);
        if (need > room)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            LC ": the rows from other nodes need %lld bytes of staging, num_rdma_bytes leaves %lld; see "
                            "ts_ep_get_low_latency_rdma_size_hint", (long long)need, (long long)room);
    }
    /* Row of each (token, k) inside its block on the expert's rank: the order dispatch used. */
    int32_t *slot = malloc((size_t)(N * K + h->E + 1) * sizeof *slot);
    if (!slot) return ts__fail(TS_ERR_OUT_OF_MEMORY, LC ": no memory for %lld slots", (long long)(N * K));
    int32_t *cnt = slot + N * K;
    memset(cnt, 0, (size_t)h->E * sizeof *cnt);
    for (int64_t t = 0; t < N; t++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
            slot[t * K + k] = e < 0 ? -1 : cnt[e]++;
        }
    for (int64_t e = 0; e < h->E; e++)
        if (cnt[e] != h->my_expert_counts[e]) {
            const long long got = cnt[e], want = h->my_expert_counts[e];
            free(slot);
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            LC ": topk_idx differs from this rank's dispatch (expert %lld: %lld selections, dispatch had "
                            "%lld)", (long long)e, got, want);
        }
    *slot_out = slot;
    return TS_OK;
}

typedef struct stage_ctx {
    const ts_ep_ll_handle *h;
    const ts_tensor *x; /* NULL: zero copy */
    uint8_t *reg;
    ts__ep_ll_clayout lay;
    bool logfmt;
} stage_ctx;

static void stage_task(void *vctx, int64_t e0, int64_t e1, int tid) {
    (void)tid;
    const stage_ctx *c = vctx;
    const ts_ep_ll_handle *h = c->h;
    const int64_t S = (int64_t)h->num_ranks * h->T, H = h->hidden, nd = H / 128;
    uint16_t *rows = (uint16_t *)(void *)(c->reg + c->lay.rows);
    uint32_t *meta = (uint32_t *)(void *)(c->reg + c->lay.meta);
    for (int64_t el = e0; el < e1; el++) {
        const int64_t n = h->recv_count[el];
        for (int64_t i = 0; i < n; i++) {
            uint16_t *dst = rows + (el * S + i) * H;
            const uint16_t *src = c->x ? (const uint16_t *)c->x->data + el * c->x->strides[0] + i * c->x->strides[1] : dst;
            if (!c->logfmt) {
                if (src != dst) ts__ep_copy_row((uint8_t *)dst, (const uint8_t *)src, H * 2);
                continue;
            }
            for (int64_t g = 0; g < nd; g++) {
                uint16_t m[2];
                ts_ep_logfmt10_encode(src + g * 128, (uint8_t *)(dst + g * 128), m);
                meta[(el * S + i) * nd + g] = (uint32_t)m[0] | (uint32_t)m[1] << 16;
            }
        }
    }
    ts__ep_copy_fence();
}

static void fill_sig(ts__ep_ll_sig *g, ts_status st, const ts_ep_ll_handle *h, bool logfmt) {
    g->status = st;
    g->flags = logfmt ? 1 : 0;
    g->hidden = h ? h->hidden : -1;
    g->num_experts = h ? h->E : -1;
    g->max_tokens = h ? h->T : -1;
}

/* Node-local sources read the signal in this rank's segment; on error the ranks of other
 * nodes get it as a header (on success send_remote sends it with the rows). */
static void publish(ts_ep_buffer *b, int half, uint64_t seq, ts_status st, const ts_ep_ll_handle *h, bool logfmt) {
    if (st != TS_OK) {
        ts__ep_ll_sig hdr;
        memset(&hdr, 0, sizeof hdr);
        fill_sig(&hdr, st, h, logfmt);
        ts__ep_ll_net_send_error(b, half, seq, &hdr);
    }
    ts__ep_ll_sig *g = ts__ep_ll_csig(b, b->rank, half);
    fill_sig(g, st, h, logfmt);
    atomic_store_explicit(&g->seq, seq, memory_order_release);
}

/* To each source on another node: its rows of every local expert (blocks [begin, +count) of
 * the staged region, expert order) and then their LogFMT metadata, packed into one contiguous
 * message (large contiguous messages take MPI's single-copy path between processes). The
 * packing buffer is private to the half and only grows (its previous sends are drained). */
static ts_status send_remote(ts_ep_buffer *b, int half, uint64_t seq, const ts_ep_ll_handle *h, const stage_ctx *sc) {
    const int R = b->num_ranks;
    const int64_t El = h->El, S = (int64_t)R * h->T, H = h->hidden, nd = H / 128;
    const int64_t per_row = 2 * H + (sc->logfmt ? nd * 4 : 0);
    ts__ep_ll_net *n = &b->ll->net[half];
    int64_t total = 0;
    for (int s = 0; s < R; s++) {
        if (ts__ep_is_local(b, s)) continue;
        for (int64_t el = 0; el < El; el++) total += (h->layout_range[el * R + s] & 0xFFFFFFFF) * per_row;
        total = ts__align(total, 64);
    }
    if ((size_t)total > n->csend_cap) {
        ts__aligned_free(n->csend);
        n->csend_cap = 0;
        n->csend = ts__aligned_alloc((size_t)total);
        if (!n->csend) return ts__fail(TS_ERR_OUT_OF_MEMORY, LC ": no memory for %lld bytes of messages", (long long)total);
        n->csend_cap = (size_t)total;
    }
    const uint8_t *rows = sc->reg + sc->lay.rows, *meta = sc->reg + sc->lay.meta;
    uint8_t *dst = n->csend;
    for (int s = 0; s < R; s++) {
        if (ts__ep_is_local(b, s)) continue;
        uint8_t *start = dst;
        for (int pass = 0; pass < (sc->logfmt ? 2 : 1); pass++)
            for (int64_t el = 0; el < El; el++) {
                const int64_t lr = h->layout_range[el * R + s], begin = lr >> 32, cnt = lr & 0xFFFFFFFF;
                if (cnt == 0) continue;
                const int64_t row = el * S + begin, bytes = pass == 0 ? cnt * H * 2 : cnt * nd * 4;
                memcpy(dst, pass == 0 ? rows + row * H * 2 : meta + row * nd * 4, (size_t)bytes);
                dst += bytes;
            }
        ts__ep_ll_sig hdr;
        memset(&hdr, 0, sizeof hdr);
        fill_sig(&hdr, TS_OK, h, sc->logfmt);
        void *data[3] = {start, NULL, NULL};
        const int counts[3] = {(int)(dst - start), 0, 0};
        const MPI_Datatype types[3] = {MPI_BYTE, MPI_BYTE, MPI_BYTE};
        ts__ep_ll_net_send(b, half, seq, s, &hdr, data, counts, types);
        dst = start + ts__align(dst - start, 64);
    }
    return TS_OK;
}

ts_status ts_ep_get_next_low_latency_combine_buffer(ts_ep_buffer *b, const ts_ep_ll_handle *h, ts_tensor *x) {
    static const char *what = "ts_ep_get_next_low_latency_combine_buffer";
    if (!b || !h || !x) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", what, !b ? "buf" : !h ? "handle" : "x");
    if (!b->ll || h->buf != b) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: handle/buffer mismatch or no LL mode", what);
    const int half = (int)((b->ll->seq + 1) & 1);
    const ts__ep_ll_clayout l = ts__ep_ll_combine_layout(h->El, h->num_ranks, h->T, h->hidden);
    if (l.total > b->ll->half_bytes) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_rdma_bytes is too small", what);
    *x = ts_tensor_3d(ts__ep_ll_comb(b, b->rank, half, l.total) + l.rows, TS_BF16, h->El, (int64_t)h->num_ranks * h->T,
                      h->hidden);
    return TS_OK;
}

ts_status ts_ep_low_latency_combine(ts_ep_buffer *b, const ts_ep_ll_combine_args *a, ts_tensor *out,
                                    ts_ep_ll_hook **hook) {
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, LC));
    if (!b->ll) return ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": buf was created without low_latency_mode");
    const uint64_t seq = ++b->ll->seq;
    const int half = (int)(seq & 1);
    int32_t *slot = NULL;
    TS__RETURN_IF_ERROR(ts__ep_ll_net_drain(b, half, LC));
    ts_status st = validate(b, a, out, &slot);
    if (st == TS_OK && a->return_recv_hook && !hook)
        st = ts__fail(TS_ERR_NULL_POINTER, LC ": hook is NULL with return_recv_hook");
    if (st == TS_OK && a->zero_copy && a->x) {
        const ts__ep_ll_clayout l =
            ts__ep_ll_combine_layout(a->handle->El, b->num_ranks, a->handle->T, a->handle->hidden);
        /* zero_copy reads this call's half; a caller passing x must pass that view */
        if (a->x->data != ts__ep_ll_comb(b, b->rank, half, l.total) + l.rows)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": zero_copy: x must be NULL or the view from "
                                                   "ts_ep_get_next_low_latency_combine_buffer");
    }
    if (st != TS_OK) {
        free(slot);
        publish(b, half, seq, st, NULL, false);
        return st;
    }
    if (b->num_nodes > 1) ts__ep_ll_net_post_headers(b, half, seq);
    const ts_ep_ll_handle *h = a->handle;
    const int R = b->num_ranks;
    const ts__ep_ll_clayout cl = ts__ep_ll_combine_layout(h->El, R, h->T, h->hidden);
    stage_ctx sc = {h, a->zero_copy ? NULL : a->x, ts__ep_ll_comb(b, b->rank, half, cl.total), cl, a->use_logfmt};
    int32_t *begin = (int32_t *)(void *)(sc.reg + sc.lay.begin);
    for (int64_t i = 0; i < h->El * R; i++) begin[i] = (int32_t)(h->layout_range[i] >> 32);
    ts__parallel_for(h->El, 1, stage_task, &sc);
    publish(b, half, seq, TS_OK, h, a->use_logfmt);
    if (b->num_nodes > 1) {
        st = send_remote(b, half, seq, h, &sc);
        if (st != TS_OK) {
            free(slot);
            return st;
        }
    }

    ts_ep_ll_hook *hk = &b->ll->hooks[half];
    /* The hook slot of this half may hold the dispatch's spent hook: reuse it. */
    ts_ep_ll_handle *hh = (ts_ep_ll_handle *)(uintptr_t)h;
    if (hk->armed && hk->op == TS__EP_LL_COMBINE) free(hk->recv_x.data); /* a hook never run */
    memset(hk, 0, sizeof *hk);
    hk->buf = b;
    hk->op = TS__EP_LL_COMBINE;
    hk->seq = seq;
    hk->h = hh;
    hk->topk_idx = *a->topk_idx;
    hk->topk_weights = *a->topk_weights;
    hk->out = *out;
    hk->use_logfmt = a->use_logfmt;
    hk->has_wait = a->combine_wait_recv_cost_stats != NULL;
    if (hk->has_wait) hk->wait_stats = *a->combine_wait_recv_cost_stats;
    /* slot rides in recv_x.data (the combine hook has no dispatch outputs) */
    hk->recv_x.data = slot;
    hk->armed = true;
    if (a->return_recv_hook) {
        *hook = hk;
        return TS_OK;
    }
    if (hook) *hook = NULL;
    hk->armed = false;
    return ts__ep_ll_combine_recv(hk);
}

ts__ep_ll_row_kernels ts__ep_ll_pick_row_kernels(void) {
    ts__ep_ll_row_kernels k = {ts__ep_ll_fma_bf16__generic, ts__ep_ll_fma_f32__generic, ts__ep_store_bf16__generic};
#ifdef TS_HAVE_AVX2_KERNELS
    if (ts__isa_avx2_up(ts__active_isa()))
        k = (ts__ep_ll_row_kernels){ts__ep_ll_fma_bf16__avx2, ts__ep_ll_fma_f32__avx2, ts__ep_store_bf16__avx2};
#endif
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512)
        k = (ts__ep_ll_row_kernels){ts__ep_ll_fma_bf16__avx512, ts__ep_ll_fma_f32__avx512, ts__ep_store_bf16__avx512};
#endif
    return k;
}

typedef struct reduce_ctx {
    ts_ep_ll_hook *hk;
    const int32_t *slot;
    const uint8_t *const *rowsp; /* [R] rows of each expert rank (combine region or staging) */
    const uint8_t *const *metap; /* [R] their LogFMT metadata */
    const int64_t *rowbase;      /* [E] row of this rank's first selection of expert e there */
    int oom;
    ts__ep_ll_row_kernels k;
} reduce_ctx;

static void reduce_task(void *vctx, int64_t t0, int64_t t1, int tid) {
    reduce_ctx *c = vctx;
    const ts_ep_ll_hook *hk = c->hk;
    const ts_ep_ll_handle *h = hk->h;
    const int64_t H = h->hidden, K = hk->topk_idx.shape[1], nd = H / 128, El = h->El;
    float *acc = ts__scratch(tid, (size_t)(H + 128) * sizeof(float));
    if (!acc) {
        c->oom = 1;
        return;
    }
    float *dec = acc + H;
    const float *w = hk->topk_weights.data;
    for (int64_t t = t0; t < t1; t++) {
        memset(acc, 0, (size_t)H * sizeof *acc);
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = ts__ep_idx_at(&hk->topk_idx, t, k);
            if (e < 0) continue;
            const float wk = w[t * hk->topk_weights.strides[0] + k * hk->topk_weights.strides[1]];
            const int d = (int)(e / El);
            const int64_t row = c->rowbase[e] + c->slot[t * K + k];
            const uint16_t *y = (const uint16_t *)(const void *)c->rowsp[d] + row * H;
            if (!hk->use_logfmt) {
                c->k.fma_bf16(acc, y, wk, H);
            } else {
                const uint32_t *meta = (const uint32_t *)(const void *)c->metap[d] + row * nd;
                for (int64_t g = 0; g < nd; g++) {
                    const uint16_t m[2] = {(uint16_t)(meta[g] & 0xFFFF), (uint16_t)(meta[g] >> 16)};
                    ts_ep_logfmt10_decode((const uint8_t *)(y + g * 128), m, dec);
                    c->k.fma_f32(acc + g * 128, dec, wk, 128);
                }
            }
        }
        uint16_t *o = (uint16_t *)hk->out.data + t * hk->out.strides[0];
        c->k.store(o, acc, H);
    }
}

static ts__ep_ll_sig *csig_of(void *ctx, ts_ep_buffer *b, int p) {
    const int half = (int)(((ts_ep_ll_hook *)ctx)->seq & 1);
    return ts__ep_is_local(b, p) ? ts__ep_ll_csig(b, p, half) : &b->ll->net[half].csig[p];
}

/* An expert rank on another node: its header agrees, so post the receive of this rank's rows
 * (size from this rank's own selections) into its place in the staging. */
static bool post_combine(void *ctx, ts_ep_buffer *b, ts__ep_ll_net *n, int p, const ts__ep_ll_sig *g) {
    const ts_ep_ll_hook *hk = ctx;
    const ts_ep_ll_handle *h = hk->h;
    if (g->hidden != h->hidden || g->max_tokens != h->T || g->num_experts != h->E || g->flags != (hk->use_logfmt ? 1 : 0))
        return false;
    const int64_t bytes = rows_from(h, p) * (2 * h->hidden + (hk->use_logfmt ? h->hidden / 128 * 4 : 0));
    if (bytes > 0)
        MPI_Irecv(ts__ep_ll_half(b, b->rank, (int)(hk->seq & 1)) + ts__ep_ll_stage_off(b->num_ranks, h->T, h->my_topk, h->hidden) +
                      recv_stage_bytes(b, h, hk->use_logfmt, p), (int)bytes,
                  MPI_BYTE, p, ts__ep_ll_tag(hk->seq, 1), b->comm, &n->req[p * TS__EP_LL_REQS + 1]);
    return true;
}

ts_status ts__ep_ll_combine_recv(ts_ep_ll_hook *hk) {
    ts_ep_buffer *b = hk->buf;
    const ts_ep_ll_handle *h = hk->h;
    const int R = b->num_ranks, half = (int)(hk->seq & 1);
    int32_t *slot = hk->recv_x.data;
    hk->recv_x.data = NULL;
    _Static_assert(3 * sizeof(uint8_t *) <= TS__EP_RANK_BOOK_BYTES,
                   "combine-hook bookkeeping outgrew the buffer's per-rank block");
    const uint8_t **rowsp = (const uint8_t **)(void *)b->rank_book;
    const uint8_t **metap = rowsp + R;
    int64_t *wt = (int64_t *)(void *)(metap + R);
    memset(wt, 0, (size_t)R * sizeof *wt);
    const ts__ep_ll_clayout lay = ts__ep_ll_combine_layout(h->El, R, h->T, h->hidden);
    ts_status st = ts__ep_ll_wait_all(b, half, hk->seq, csig_of, post_combine, hk, LC, wt);
    for (int d = 0; d < R && st == TS_OK; d++) {
        const ts__ep_ll_sig *g = csig_of(hk, b, d);
        if (g->status != TS_OK)
            st = ts__fail(TS_ERR_PEER, LC ": rank %d rejected its arguments (%s)", d, ts_status_str((ts_status)g->status));
        else if (g->hidden != h->hidden || g->max_tokens != h->T || g->num_experts != h->E)
            st = ts__fail(TS_ERR_SHAPE, LC ": rank %d combines hidden %lld / T %lld / E %lld, this rank %lld / %lld / %lld",
                          d, (long long)g->hidden, (long long)g->max_tokens, (long long)g->num_experts,
                          (long long)h->hidden, (long long)h->T, (long long)h->E);
        else if (g->flags != (hk->use_logfmt ? 1 : 0))
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, LC ": rank %d differs in use_logfmt", d);
    }
    int64_t *rowbase = NULL;
    if (st == TS_OK) {
        rowbase = ts__ep_ll_tmp(b, (size_t)h->E * sizeof *rowbase);
        if (!rowbase) st = ts__fail(TS_ERR_OUT_OF_MEMORY, LC ": no memory");
    }
    if (st == TS_OK) {
        const int64_t S = (int64_t)R * h->T;
        for (int d = 0; d < R; d++) {
            if (ts__ep_is_local(b, d)) {
                const uint8_t *reg = ts__ep_ll_comb(b, d, half, lay.total);
                const int32_t *begin = (const int32_t *)(const void *)(reg + lay.begin);
                rowsp[d] = reg + lay.rows;
                metap[d] = reg + lay.meta;
                for (int64_t el = 0; el < h->El; el++) rowbase[d * h->El + el] = el * S + begin[el * R + b->rank];
            } else {
                /* staged: expert order, this rank's selections of each in (t, k) order */
                const int64_t n = rows_from(h, d);
                rowsp[d] = ts__ep_ll_half(b, b->rank, half) + ts__ep_ll_stage_off(R, h->T, h->my_topk, h->hidden) +
                           recv_stage_bytes(b, h, hk->use_logfmt, d);
                metap[d] = rowsp[d] + n * 2 * h->hidden;
                int64_t at = 0;
                for (int64_t el = 0; el < h->El; el++) {
                    rowbase[d * h->El + el] = at;
                    at += h->my_expert_counts[d * h->El + el];
                }
            }
        }
    }
    if (st == TS_OK) {
        reduce_ctx rc = {hk, slot, rowsp, metap, rowbase, 0, ts__ep_ll_pick_row_kernels()};
        ts__parallel_for(hk->topk_idx.shape[0], 4, reduce_task, &rc);
        if (rc.oom) st = ts__fail(TS_ERR_OUT_OF_MEMORY, LC ": no scratch memory for the accumulator");
    }
    if (hk->has_wait && (st == TS_OK || st == TS_ERR_TIMEOUT)) {
        int64_t *ws = hk->wait_stats.data;
        for (int d = 0; d < R; d++) ws[d * hk->wait_stats.strides[0]] += wt[d];
    }
    free(slot);
    return st;
}
