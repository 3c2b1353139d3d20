/* flash_mla_with_kvcache: dense (paged bf16 KV, causal bottom-right, GQA) and sparse (FP8 KV,
 * V32 / MODEL1, indices with -1, topk_length, attn_sink, extra cache) MLA decode.
 *
 * Every argument is checked (indices and used block-table entries included) before any output
 * is written. Work items are (group, row panel, chunk): sparse groups are (request, query
 * token), dense groups are (request, kv head) holding all s_q * h_q/h_kv rows so each decoded
 * token serves all of them; chunks come from the handle's plan (a function of the request's
 * own length), so results are batch- and thread-invariant. */
#include "flash_mla_internal.h"
#include "../core/internal.h"

#include <math.h>
#include <string.h>

typedef struct item {
    int32_t req, grp2, panel, chunk; /* grp2: query token (sparse) or kv head (dense) */
} item;

typedef struct dec_ctx {
    const ts__mla_kernels *kern;
    const ts_flash_mla_kvcache_args *a;
    ts_mla_metadata *meta;
    ts_tensor *out, *lse;
    int64_t b, s_q, h_q, h_kv, dk, hpk, rows, npanels, topk, extra_topk;
    int64_t g2n; /* groups per request: s_q (sparse) or h_kv (dense) */
    ts_mla_kv_layout layout;
    float scale;
    const item *items;
    const int32_t *merge_groups; /* pairs (req, query token / kv head) that need a merge */
    size_t task_bytes;
    volatile int oom; /* a task could not get its scratch */
} dec_ctx;

static const int32_t *i32_at(const ts_tensor *t, int64_t i0, int64_t i1) {
    return (const int32_t *)t->data + i0 * t->strides[0] + (t->ndim > 1 ? i1 * t->strides[1] : 0);
}

static int64_t count_of(const ts_tensor *len, int64_t i, int64_t topk) {
    return len ? ts__min64(*i32_at(len, i, 0), topk) : topk;
}

/* q pointers and causal limits of a group's rows */
static void group_rows(const dec_ctx *c, int64_t i, int64_t g2, const uint16_t **q,
                       int32_t *lim) {
    const ts_tensor *qt = c->a->q;
    if (c->a->indices) {
        for (int64_t h = 0; h < c->h_q; h++) {
            q[h] = (const uint16_t *)qt->data + i * qt->strides[0] + g2 * qt->strides[1] +
                   h * qt->strides[2];
            lim[h] = TS__MLA_LIM_ALL;
        }
        return;
    }
    int64_t seqlen = *i32_at(c->a->cache_seqlens, i, 0);
    for (int64_t s = 0; s < c->s_q; s++)
        for (int64_t hh = 0; hh < c->hpk; hh++) {
            int64_t r = s * c->hpk + hh;
            q[r] = (const uint16_t *)qt->data + i * qt->strides[0] + s * qt->strides[1] +
                   (g2 * c->hpk + hh) * qt->strides[2];
            int64_t l = c->a->causal ? seqlen - c->s_q + s : TS__MLA_LIM_ALL;
            lim[r] = (int32_t)(l < -1 ? -1 : l);
        }
}

/* sparse: request i's slots in order (the first topk_length[i] of indices[i][s], then the first
 * extra_topk_length[i] of the extra row) */
static int64_t slot_count(const dec_ctx *c, int64_t i) {
    const ts_flash_mla_kvcache_args *a = c->a;
    int64_t n = count_of(a->topk_length, i, c->topk);
    if (a->extra_indices_in_kvcache) n += count_of(a->extra_topk_length, i, c->extra_topk);
    return n;
}

/* compact the valid slots of [s0, s1) of (request i, token s), in slot order */
static int64_t sparse_list(const dec_ctx *c, int64_t i, int64_t s, int64_t s0, int64_t s1,
                           const uint8_t **ptr, const uint8_t **sptr, uint8_t *kinds) {
    const ts_flash_mla_kvcache_args *a = c->a;
    const int64_t nmain = count_of(a->topk_length, i, c->topk);
    int64_t n = 0;
    for (int e = 0; e < 2; e++) {
        const ts_tensor *ind = e ? a->extra_indices_in_kvcache : a->indices;
        const ts_tensor *cache = e ? a->extra_k_cache : a->k_cache;
        if (!ind) continue;
        const int64_t base = e ? nmain : 0;
        const int64_t cnt = e ? count_of(a->extra_topk_length, i, c->extra_topk) : nmain;
        const int64_t k0 = ts__max64(0, s0 - base), k1 = ts__min64(cnt, s1 - base);
        const int32_t *row = i32_at(ind, i, s);
        const int64_t P = cache->shape[1];
        for (int64_t k = k0; k < k1; k++) {
            int32_t v = row[k];
            if (v == -1) continue;
            ptr[n] = ts__mla_fp8_token(cache, c->layout, v / P, v % P, &sptr[n]);
            kinds[n] = c->layout == TS_MLA_KV_V32 ? TS__MLA_TOK_V32 : TS__MLA_TOK_MODEL1;
            n++;
        }
    }
    return n;
}

/* out row and lse element of group row r */
static void row_out(const dec_ctx *c, int64_t i, int64_t g2, int64_t r, uint16_t **o, float **l,
                    int *has_sink, float *sink) {
    int64_t s, h;
    if (c->a->indices) {
        s = g2;
        h = r;
    } else {
        s = r / c->hpk;
        h = g2 * c->hpk + r % c->hpk;
    }
    *o = (uint16_t *)c->out->data + i * c->out->strides[0] + s * c->out->strides[1] +
         h * c->out->strides[2];
    *l = (float *)c->lse->data + i * c->lse->strides[0] + h * c->lse->strides[1] +
         s * c->lse->strides[2];
    const ts_tensor *sk = c->a->attn_sink;
    *has_sink = sk != NULL;
    *sink = sk ? ((const float *)sk->data)[h * sk->strides[0]] : 0.0f;
}

static void run_items(void *vctx, int64_t begin, int64_t end, int tid) {
    dec_ctx *c = (dec_ctx *)vctx;
    const ts_flash_mla_kvcache_args *a = c->a;
    const int sparse = a->indices != NULL;
    char *w = (char *)ts__scratch(tid, c->task_bytes);
    if (!w) {
        c->oom = 1;
        return;
    }
    const int64_t ltot = c->topk + c->extra_topk;
    const uint8_t **ptr = (const uint8_t **)w;
    const uint8_t **sptr = ptr + ltot;
    const uint16_t **q = (const uint16_t **)(sptr + ltot);
    int32_t *lim = (int32_t *)(q + c->rows);
    uint8_t *kinds = (uint8_t *)(lim + c->rows);
    void *ws = (void *)(((uintptr_t)(kinds + ltot) + 63) & ~(uintptr_t)63);
    for (int64_t it = begin; it < end; it++) {
        const item *x = &c->items[it];
        const int64_t i = x->req, g2 = x->grp2;
        group_rows(c, i, g2, q, lim);
        ts__mla_rows rows = {c->rows, c->dk, c->scale, q, lim};
        ts__mla_toklist tl;
        memset(&tl, 0, sizeof tl);
        int64_t t0 = 0, t1;
        const int64_t nchunks = c->meta->chunk_off[i + 1] - c->meta->chunk_off[i];
        if (sparse) {
            /* the chunk's slot range; its valid slots become the token list */
            int64_t ns = slot_count(c, i), s0 = ts__min64(ns, x->chunk * c->meta->chunk);
            int64_t s1 = nchunks > 1 ? ts__min64(ns, s0 + c->meta->chunk) : ns;
            t1 = sparse_list(c, i, g2, s0, s1, ptr, sptr, kinds);
            tl.ptr = ptr;
            tl.sptr = sptr;
            tl.kinds = kinds;
            tl.len = t1;
        } else {
            const ts_tensor *kc = a->k_cache;
            tl.dense = 1;
            tl.base = (const uint8_t *)kc->data + g2 * kc->strides[2] * 2;
            tl.block_stride = kc->strides[0] * 2;
            tl.row_stride = kc->strides[1] * 2;
            tl.page = kc->shape[1];
            tl.btab = i32_at(a->block_table, i, 0);
            int64_t seqlen = *i32_at(a->cache_seqlens, i, 0);
            tl.len = seqlen;
            t0 = ts__min64(seqlen, x->chunk * c->meta->chunk);
            t1 = nchunks > 1 ? ts__min64(seqlen, t0 + c->meta->chunk) : seqlen;
        }
        int64_t r0, r1;
        ts__mla_panel_rows(c->rows, c->npanels, x->panel, &r0, &r1);
        if (r0 >= r1) continue;
        ts__mla_state st;
        ts__mla_run_span(c->kern, &rows, r0, r1, &tl, t0, t1, ws, &st);
        if (nchunks > 1) {
            int64_t slot = (c->meta->chunk_off[i] + x->chunk) * c->g2n + g2;
            float *p = c->meta->part + slot * c->rows * (TS__MLA_DV + 2);
            for (int64_t r = r0; r < r1; r++) {
                float *pr = p + r * (TS__MLA_DV + 2);
                pr[0] = st.m[r - r0];
                pr[1] = st.l[r - r0];
                memcpy(pr + 2, st.o + (r - r0) * TS__MLA_DV, TS__MLA_DV * 4);
            }
            continue;
        }
        for (int64_t r = r0; r < r1; r++) {
            uint16_t *o;
            float *l, sink;
            int has_sink;
            row_out(c, i, g2, r, &o, &l, &has_sink, &sink);
            ts__mla_finish_row(c->kern, st.m[r - r0], st.l[r - r0], st.o + (r - r0) * TS__MLA_DV,
                               has_sink, sink, o, l);
        }
    }
}

/* merge work units: (merge group, strip of TS__MLA_RS rows), so one split request's merge and
 * finish also spread over the threads (rows are independent: no effect on results) */
static void merge_groups(void *vctx, int64_t begin, int64_t end, int tid) {
    dec_ctx *c = (dec_ctx *)vctx;
    const int64_t parts = ts__ceil_div(c->rows, TS__MLA_RS);
    int64_t maxn = 0;
    for (int64_t u = begin; u < end; u++) {
        int64_t i = c->merge_groups[2 * (u / parts)];
        maxn = ts__max64(maxn, c->meta->chunk_off[i + 1] - c->meta->chunk_off[i]);
    }
    char *w = (char *)ts__scratch(tid, (size_t)maxn * (8 + 8) + TS__MLA_DV * 4 + 64);
    if (!w) {
        c->oom = 1;
        return;
    }
    float *mm = (float *)w, *ll = mm + maxn;
    const float **op = (const float **)(ll + maxn); /* 2 * maxn floats: 8-byte aligned */
    float *oo = (float *)(op + maxn);
    for (int64_t u = begin; u < end; u++) {
        const int64_t g = u / parts, part = u % parts;
        int64_t i = c->merge_groups[2 * g], g2 = c->merge_groups[2 * g + 1];
        int64_t n = c->meta->chunk_off[i + 1] - c->meta->chunk_off[i];
        const int64_t r1 = ts__min64(c->rows, (part + 1) * TS__MLA_RS);
        for (int64_t r = part * TS__MLA_RS; r < r1; r++) {
            for (int64_t k = 0; k < n; k++) {
                int64_t slot = (c->meta->chunk_off[i] + k) * c->g2n + g2;
                const float *pr = c->meta->part + (slot * c->rows + r) * (TS__MLA_DV + 2);
                mm[k] = pr[0];
                ll[k] = pr[1];
                op[k] = pr + 2;
            }
            float m, l;
            ts__mla_merge(c->kern, n, mm, ll, op, &m, &l, oo);
            uint16_t *o;
            float *lp, sink;
            int has_sink;
            row_out(c, i, g2, r, &o, &lp, &has_sink, &sink);
            ts__mla_finish_row(c->kern, m, l, oo, has_sink, sink, o, lp);
        }
    }
}

static ts_status check_args(const ts_flash_mla_kvcache_args *a, ts_tensor *out, ts_tensor *lse,
                            dec_ctx *c) {
    static const char fn[] = "ts_flash_mla_with_kvcache";
    if (!a) return ts__fail(TS_ERR_NULL_POINTER, "%s: args is NULL", fn);
    if (!a->tile_scheduler_metadata)
        return ts__fail(TS_ERR_NULL_POINTER, "%s: tile_scheduler_metadata is NULL", fn);
    TS__RETURN_IF_ERROR(ts__mla_check(fn, a->q, "q", TS_BF16, 4, NULL));
    const int64_t b = a->q->shape[0], sq = a->q->shape[1], hq = a->q->shape[2],
                  dk = a->q->shape[3];
    if (dk != 576 && dk != 512)
        return ts__fail(TS_ERR_SHAPE, "%s: q head dim %lld, expected 576 or 512", fn,
                        (long long)dk);
    if (a->head_dim_v != TS__MLA_DV)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: head_dim_v = %lld, only 512 is supported", fn,
                        (long long)a->head_dim_v);
    if (hq < 1 || sq < 1)
        return ts__fail(TS_ERR_SHAPE, "%s: q has s_q = %lld, h_q = %lld", fn, (long long)sq,
                        (long long)hq);
    int64_t os[4] = {b, sq, hq, TS__MLA_DV};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, out, "out", TS_BF16, 4, os));
    if (!lse) return ts__fail(TS_ERR_NULL_POINTER, "%s: lse is NULL", fn);
    int64_t ls[3] = {b, hq, sq};
    TS__RETURN_IF_ERROR(ts_tensor_check(lse, "lse"));
    if (lse->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "%s: lse must be f32", fn);
    if (lse->ndim != 3 || lse->shape[0] != ls[0] || lse->shape[1] != ls[1] || lse->shape[2] != ls[2])
        return ts__fail(TS_ERR_SHAPE, "%s: lse must be [b, h_q, s_q] = [%lld, %lld, %lld]", fn,
                        (long long)b, (long long)hq, (long long)sq);
    float scale = a->softmax_scale;
    if (!(scale > 0.0f)) scale = (float)(1.0 / sqrt((double)dk));
    c->a = a;
    c->out = out;
    c->lse = lse;
    c->b = b;
    c->s_q = sq;
    c->h_q = hq;
    c->dk = dk;
    c->scale = scale;
    c->meta = a->tile_scheduler_metadata;

    if (a->indices) {
        if (!a->is_fp8_kvcache)
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: sparse decode needs is_fp8_kvcache", fn);
        if (a->causal)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: causal must be false in sparse mode", fn);
        c->layout = dk == 576 ? TS_MLA_KV_V32 : TS_MLA_KV_MODEL1;
        TS__RETURN_IF_ERROR(ts__mla_check_fp8_cache(fn, a->k_cache, "k_cache", c->layout));
        int64_t is[3] = {b, sq, -1};
        TS__RETURN_IF_ERROR(ts__mla_check(fn, a->indices, "indices", TS_I32, 3, is));
        c->topk = a->indices->shape[2];
        c->h_kv = 1;
        c->hpk = hq;
        c->rows = hq;
        if (a->attn_sink) {
            int64_t ss[1] = {hq};
            TS__RETURN_IF_ERROR(ts__mla_check(fn, a->attn_sink, "attn_sink", TS_F32, 1, ss));
        }
        int64_t bs[1] = {b};
        if (a->topk_length)
            TS__RETURN_IF_ERROR(ts__mla_check(fn, a->topk_length, "topk_length", TS_I32, 1, bs));
        if ((a->extra_k_cache != NULL) != (a->extra_indices_in_kvcache != NULL))
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: extra_k_cache and extra_indices_in_kvcache go together", fn);
        if (a->extra_topk_length && !a->extra_k_cache)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: extra_topk_length without extra_k_cache",
                            fn);
        c->extra_topk = 0;
        if (a->extra_k_cache) {
            TS__RETURN_IF_ERROR(
                ts__mla_check_fp8_cache(fn, a->extra_k_cache, "extra_k_cache", c->layout));
            TS__RETURN_IF_ERROR(ts__mla_check(fn, a->extra_indices_in_kvcache,
                                              "extra_indices_in_kvcache", TS_I32, 3, is));
            c->extra_topk = a->extra_indices_in_kvcache->shape[2];
            if (a->extra_topk_length)
                TS__RETURN_IF_ERROR(ts__mla_check(fn, a->extra_topk_length, "extra_topk_length",
                                                  TS_I32, 1, bs));
        }
        /* lengths and every index a call may read */
        for (int e = 0; e < 2; e++) {
            const ts_tensor *ind = e ? a->extra_indices_in_kvcache : a->indices;
            const ts_tensor *len = e ? a->extra_topk_length : a->topk_length;
            const ts_tensor *cache = e ? a->extra_k_cache : a->k_cache;
            const char *nm = e ? "extra_indices_in_kvcache" : "indices";
            if (!ind) continue;
            const int64_t lim = cache->shape[0] * cache->shape[1], tk = ind->shape[2];
            for (int64_t i = 0; i < b; i++) {
                if (len) {
                    int32_t v = *i32_at(len, i, 0);
                    if (v < 0 || v > tk)
                        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s[%lld] = %d is outside [0, %lld]",
                                        fn, e ? "extra_topk_length" : "topk_length", (long long)i,
                                        (int)v, (long long)tk);
                }
                int64_t cnt = count_of(len, i, tk);
                for (int64_t s = 0; s < sq; s++) {
                    const int32_t *row = i32_at(ind, i, s);
                    for (int64_t k = 0; k < cnt; k++)
                        if (row[k] != -1 && (row[k] < 0 || row[k] >= lim))
                            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                            "%s: %s[%lld][%lld][%lld] = %d is outside the cache "
                                            "(-1 or [0, %lld))",
                                            fn, nm, (long long)i, (long long)s, (long long)k,
                                            (int)row[k], (long long)lim);
                }
            }
        }
    } else {
        if (a->is_fp8_kvcache)
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: dense decode takes a bf16 cache (no FP8)", fn);
        if (a->attn_sink || a->extra_k_cache || a->extra_indices_in_kvcache || a->topk_length ||
            a->extra_topk_length)
            return ts__fail(TS_ERR_UNSUPPORTED,
                            "%s: attn_sink, extra cache and topk_length are sparse-only", fn);
        TS__RETURN_IF_ERROR(ts__mla_check(fn, a->k_cache, "k_cache", TS_BF16, 4, NULL));
        const ts_tensor *kc = a->k_cache;
        if (kc->shape[3] != dk)
            return ts__fail(TS_ERR_SHAPE, "%s: k_cache head dim %lld != q's %lld", fn,
                            (long long)kc->shape[3], (long long)dk);
        if (kc->shape[1] < 1 || kc->shape[2] < 1 || hq % kc->shape[2] != 0)
            return ts__fail(TS_ERR_SHAPE, "%s: k_cache page %lld / h_kv %lld (h_q = %lld)", fn,
                            (long long)kc->shape[1], (long long)kc->shape[2], (long long)hq);
        c->h_kv = kc->shape[2];
        c->hpk = hq / c->h_kv;
        c->rows = sq * c->hpk;
        c->topk = c->extra_topk = 0;
        int64_t bs[1] = {b}, bt[2] = {b, -1};
        TS__RETURN_IF_ERROR(ts__mla_check(fn, a->block_table, "block_table", TS_I32, 2, bt));
        TS__RETURN_IF_ERROR(ts__mla_check(fn, a->cache_seqlens, "cache_seqlens", TS_I32, 1, bs));
        const int64_t P = kc->shape[1], nb = kc->shape[0], mb = a->block_table->shape[1];
        for (int64_t i = 0; i < b; i++) {
            int32_t sl = *i32_at(a->cache_seqlens, i, 0);
            if (sl < 0 || ts__ceil_div(sl, P) > mb)
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "%s: cache_seqlens[%lld] = %d is outside [0, %lld]", fn,
                                (long long)i, (int)sl, (long long)(mb * P));
            const int32_t *bt_row = i32_at(a->block_table, i, 0);
            for (int64_t j = 0; j < ts__ceil_div(sl, P); j++)
                if (bt_row[j] < 0 || bt_row[j] >= nb)
                    return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                    "%s: block_table[%lld][%lld] = %d is outside [0, %lld)", fn,
                                    (long long)i, (long long)j, (int)bt_row[j], (long long)nb);
        }
    }
    return TS_OK;
}

ts_status ts_flash_mla_with_kvcache(const ts_flash_mla_kvcache_args *a, ts_tensor *out,
                                    ts_tensor *lse) {
    static const char fn[] = "ts_flash_mla_with_kvcache";
    dec_ctx c;
    memset(&c, 0, sizeof c);
    TS__RETURN_IF_ERROR(check_args(a, out, lse, &c));
    const int sparse = a->indices != NULL;

    ts__mla_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.b = c.b;
    cfg.s_q = c.s_q;
    cfg.h_q = c.h_q;
    cfg.h_kv = c.h_kv;
    cfg.d_qk = c.dk;
    cfg.page = a->k_cache->shape[1];
    cfg.extra_page = a->extra_k_cache ? a->extra_k_cache->shape[1] : 0;
    cfg.topk = c.topk;
    cfg.extra_topk = c.extra_topk;
    cfg.causal = a->causal && c.s_q > 1; /* upstream turns causal off when s_q == 1 */
    cfg.sparse = sparse;
    cfg.has_topk_length = a->topk_length != NULL;
    cfg.has_extra_topk_length = a->extra_topk_length != NULL;
    /* the values the plan depends on (serial scratch: no allocation once warm; the arena is
     * reused for the item list below) */
    int64_t nvals = sparse ? (cfg.has_topk_length + cfg.has_extra_topk_length) * c.b : c.b;
    int64_t *lens = (int64_t *)ts__scratch(0, (size_t)c.b * 8 + (size_t)nvals * 4 + 64);
    if (!lens) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    int32_t *vals = (int32_t *)(lens + c.b);
    int64_t nv = 0;
    for (int e = 0; e < 3; e++) {
        const ts_tensor *t = sparse ? (e == 0 ? a->topk_length : e == 1 ? a->extra_topk_length : NULL)
                                    : (e == 0 ? a->cache_seqlens : NULL);
        if (!t) continue;
        for (int64_t i = 0; i < c.b; i++) vals[nv++] = *i32_at(t, i, 0);
    }
    for (int64_t i = 0; i < c.b; i++)
        lens[i] = sparse ? slot_count(&c, i) : *i32_at(a->cache_seqlens, i, 0);
    TS__RETURN_IF_ERROR(ts__mla_meta_bind(c.meta, &cfg, vals, nv, lens));

    c.kern = ts__mla_pick_kernels();
    const int64_t g2n = sparse ? c.s_q : c.h_kv;
    c.g2n = g2n;
    /* panels only where (group, chunk) items alone leave threads idle */
    c.npanels = ts__mla_panels(c.meta->chunk_off[c.b] * g2n, c.rows);
    const int64_t nitems = c.meta->chunk_off[c.b] * g2n * c.npanels;
    int64_t nmerge = 0;
    for (int64_t i = 0; i < c.b; i++)
        if (c.meta->chunk_off[i + 1] - c.meta->chunk_off[i] > 1) nmerge += g2n;
    size_t ib = (size_t)nitems * sizeof(item), mb = (size_t)(2 * nmerge) * sizeof(int32_t);
    char *w = (char *)ts__scratch(0, ib + mb + 64);
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    item *items = (item *)w;
    int32_t *mg = (int32_t *)(w + ib);
    int64_t n = 0, nm = 0;
    for (int64_t i = 0; i < c.b; i++) {
        int64_t nch = c.meta->chunk_off[i + 1] - c.meta->chunk_off[i];
        for (int64_t g = 0; g < g2n; g++) {
            if (nch > 1) {
                mg[2 * nm] = (int32_t)i;
                mg[2 * nm + 1] = (int32_t)g;
                nm++;
            }
            for (int64_t p = 0; p < c.npanels; p++)
                for (int64_t k = 0; k < nch; k++)
                    items[n++] = (item){(int32_t)i, (int32_t)g, (int32_t)p, (int32_t)k};
        }
    }
    c.items = items;
    c.merge_groups = mg;
    int64_t prow0, prow1, maxrows = 0;
    for (int64_t p = 0; p < c.npanels; p++) {
        ts__mla_panel_rows(c.rows, c.npanels, p, &prow0, &prow1);
        maxrows = ts__max64(maxrows, prow1 - prow0);
    }
    const int64_t ltot = c.topk + c.extra_topk;
    c.task_bytes = (size_t)ltot * 17 + (size_t)c.rows * 12 + 128 +
                   ts__mla_span_ws_bytes(maxrows, c.dk);
    ts__parallel_items(nitems, 1, run_items, &c);
    if (nm && !c.oom)
        ts__parallel_for(nm * ts__ceil_div(c.rows, TS__MLA_RS), 1, merge_groups, &c);
    if (c.oom) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for task scratch", fn);
    return TS_OK;
}
