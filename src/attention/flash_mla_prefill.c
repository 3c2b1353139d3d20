/* flash_mla_sparse_fwd (sparse prefill): every query token attends to its own gathered bf16 KV
 * rows (invalid = < 0 or >= s_kv, or a slot at or past topk_length[i]). One group per query
 * token; its valid rows are compacted in slot order and decoded once per tile for all heads. */
#include "flash_mla_internal.h"
#include "../core/internal.h"

#include <math.h>
#include <string.h>

typedef struct pf_ctx {
    const ts__mla_kernels *kern;
    const ts_tensor *q, *kv, *ind, *sink, *tlen;
    ts_tensor *out, *maxl, *lse;
    int64_t h_q, dk, topk, s_kv, npanels;
    float scale;
    size_t task_bytes;
    volatile int oom;
} pf_ctx;

static void run(void *vctx, int64_t begin, int64_t end, int tid) {
    pf_ctx *c = (pf_ctx *)vctx;
    char *w = (char *)ts__scratch(tid, c->task_bytes);
    if (!w) {
        c->oom = 1;
        return;
    }
    const uint8_t **ptr = (const uint8_t **)w;
    const uint16_t **q = (const uint16_t **)(ptr + c->topk);
    uint8_t *kinds = (uint8_t *)(q + c->h_q);
    void *ws = (void *)(((uintptr_t)(kinds + c->topk) + 63) & ~(uintptr_t)63);
    memset(kinds, TS__MLA_TOK_BF16, (size_t)c->topk);
    for (int64_t it = begin; it < end; it++) {
        const int64_t i = it / c->npanels, panel = it % c->npanels;
        int64_t cnt = c->topk;
        if (c->tlen) {
            int32_t v = ((const int32_t *)c->tlen->data)[i * c->tlen->strides[0]];
            cnt = v; /* validated: 0 <= v <= topk */
        }
        const int32_t *row = (const int32_t *)c->ind->data + i * c->ind->strides[0];
        int64_t n = 0;
        for (int64_t k = 0; k < cnt; k++) {
            int32_t v = row[k];
            if (v < 0 || v >= c->s_kv) continue;
            ptr[n++] = (const uint8_t *)((const uint16_t *)c->kv->data + v * c->kv->strides[0]);
        }
        for (int64_t h = 0; h < c->h_q; h++)
            q[h] = (const uint16_t *)c->q->data + i * c->q->strides[0] + h * c->q->strides[1];
        ts__mla_rows rows = {c->h_q, c->dk, c->scale, q, NULL};
        ts__mla_toklist tl;
        memset(&tl, 0, sizeof tl);
        tl.ptr = ptr;
        tl.kinds = kinds;
        tl.len = n;
        int64_t r0, r1;
        ts__mla_panel_rows(c->h_q, c->npanels, panel, &r0, &r1);
        if (r0 >= r1) continue;
        ts__mla_state st;
        ts__mla_run_span(c->kern, &rows, r0, r1, &tl, 0, n, ws, &st);
        for (int64_t h = r0; h < r1; h++) {
            uint16_t *o = (uint16_t *)c->out->data + i * c->out->strides[0] + h * c->out->strides[1];
            float *lp = (float *)c->lse->data + i * c->lse->strides[0] + h * c->lse->strides[1];
            float *mp = (float *)c->maxl->data + i * c->maxl->strides[0] + h * c->maxl->strides[1];
            int has_sink = c->sink != NULL;
            float sk = has_sink ? ((const float *)c->sink->data)[h * c->sink->strides[0]] : 0.0f;
            float l = st.l[h - r0];
            ts__mla_finish_row(c->kern, st.m[h - r0], l, st.o + (h - r0) * TS__MLA_DV, has_sink, sk, o, lp);
            *mp = l > 0.0f ? st.m[h - r0] : -INFINITY;
        }
    }
}

ts_status ts_flash_mla_sparse_fwd(const ts_tensor *q, const ts_tensor *kv,
                                  const ts_tensor *indices, float sm_scale, int64_t d_v,
                                  const ts_tensor *attn_sink, const ts_tensor *topk_length,
                                  ts_tensor *out, ts_tensor *max_logits, ts_tensor *lse) {
    static const char fn[] = "ts_flash_mla_sparse_fwd";
    TS__RETURN_IF_ERROR(ts__mla_check(fn, q, "q", TS_BF16, 3, NULL));
    const int64_t sq = q->shape[0], hq = q->shape[1], dk = q->shape[2];
    if (dk != 576 && dk != 512)
        return ts__fail(TS_ERR_SHAPE, "%s: q head dim %lld, expected 576 or 512", fn,
                        (long long)dk);
    if (d_v != TS__MLA_DV)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: d_v = %lld, only 512 is supported", fn,
                        (long long)d_v);
    if (!(sm_scale > 0.0f) || isinf(sm_scale))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: sm_scale must be finite and > 0", fn);
    int64_t ks[3] = {-1, 1, dk};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, kv, "kv", TS_BF16, 3, ks));
    int64_t is[3] = {sq, 1, -1};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, indices, "indices", TS_I32, 3, is));
    int64_t os[3] = {sq, hq, TS__MLA_DV}, ls[2] = {sq, hq}, hs[1] = {hq}, ss[1] = {sq};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, out, "out", TS_BF16, 3, os));
    TS__RETURN_IF_ERROR(ts__mla_check(fn, max_logits, "max_logits", TS_F32, 2, ls));
    TS__RETURN_IF_ERROR(ts__mla_check(fn, lse, "lse", TS_F32, 2, ls));
    if (attn_sink) TS__RETURN_IF_ERROR(ts__mla_check(fn, attn_sink, "attn_sink", TS_F32, 1, hs));
    if (topk_length)
        TS__RETURN_IF_ERROR(ts__mla_check(fn, topk_length, "topk_length", TS_I32, 1, ss));
    if (hq < 1) return ts__fail(TS_ERR_SHAPE, "%s: h_q = 0", fn);
    for (int64_t i = 0; topk_length && i < sq; i++) {
        int32_t v = ((const int32_t *)topk_length->data)[i * topk_length->strides[0]];
        if (v < 0 || v > indices->shape[2])
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: topk_length[%lld] = %d is outside [0, %lld]",
                            fn, (long long)i, (int)v, (long long)indices->shape[2]);
    }
    pf_ctx c;
    memset(&c, 0, sizeof c);
    c.kern = ts__mla_pick_kernels();
    c.q = q;
    c.kv = kv;
    c.ind = indices;
    c.sink = attn_sink;
    c.tlen = topk_length;
    c.out = out;
    c.maxl = max_logits;
    c.lse = lse;
    c.h_q = hq;
    c.dk = dk;
    c.topk = indices->shape[2];
    c.s_kv = kv->shape[0];
    c.scale = sm_scale;
    c.npanels = ts__mla_panels(sq, hq);
    int64_t maxrows = 0, r0, r1;
    for (int64_t p = 0; p < c.npanels; p++) {
        ts__mla_panel_rows(hq, c.npanels, p, &r0, &r1);
        maxrows = ts__max64(maxrows, r1 - r0);
    }
    c.task_bytes = (size_t)c.topk * 9 + (size_t)hq * 8 + 128 + ts__mla_span_ws_bytes(maxrows, dk);
    ts__parallel_items(sq * c.npanels, 1, run, &c);
    if (c.oom) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for task scratch", fn);
    return TS_OK;
}
