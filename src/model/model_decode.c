/* One decode step (docs/model.md §4) for a batch of sequences, and the pass through the layers
 * that the prefill (model_prefill.c) shares: embedding, the blocks (mHC around attention and
 * MoE), the head. All rows go through each layer together so every GEMM sees M = rows; the
 * kernels are batch-invariant, so a row's logits do not depend on the other rows. */
#include "model_internal.h"
#include "hf_v3.h"

#include <string.h>

#define WS_FIELDS(F_)                                                                \
    F_(X, uint16_t, B * hc * D) F_(X2, uint16_t, B * hc * D) F_(xf, float, B * hc * D)  \
    F_(mixf, float, B * nmix) F_(mix, double, B * nmix) F_(post, double, B * hc) F_(comb, double, B * hc * hc)       \
    F_(y, uint16_t, B * D) F_(a, uint16_t, B * D) F_(f, uint16_t, B * D)                \
    F_(a8, uint8_t, B * kmax) F_(a8sf, float, B * (kmax / 32))                         \
    F_(act_f32, float, E * B + B * kmax) F_(qr0, uint16_t, B * QL) F_(qr, uint16_t, B * QL) \
    F_(q, uint16_t, B * H * 512) F_(kv0, uint16_t, B * 512) F_(kv, uint16_t, B * 512)   \
    F_(o, uint16_t, B * H * 512) F_(lse, float, B * H) F_(z, uint16_t, B * OG)          \
    F_(ck, float, B * 1024) F_(cg, float, B * 1024) F_(ik, float, B * 256)              \
    F_(ig, float, B * 256) F_(qi, uint16_t, B * IH * 128) F_(wi, float, B * IH)         \
    F_(qi4, uint8_t, B * IH * 64) F_(qi4sf, int32_t, B * IH)                           \
    F_(ilogits, float, c->max_seq_len / 4 + 1) F_(itopk, int32_t, c->index_topk)       \
    F_(ikeys, uint8_t, c->max_seq_len / 4 * 64) F_(ikeys_sf, int32_t, c->max_seq_len / 4) \
    F_(win_idx, int32_t, B * c->window_size) F_(win_len, int32_t, B)                   \
    F_(ext_idx, int32_t, B * ext) F_(ext_len, int32_t, B) F_(gs, float, B * E)          \
    F_(sel, int32_t, B * K) F_(selw, float, B * K) F_(x8, uint8_t, B * D)               \
    F_(x8sf, float, B * (D / 32)) F_(ga, uint8_t, Eg * B * D)                           \
    F_(gasf, float, Eg * B * (D / 32)) F_(masked_m, int32_t, E) F_(slot, int32_t, B * K) \
    F_(gate, uint16_t, Eg * B * I) F_(up, uint16_t, Eg * B * I) F_(h8, uint8_t, Eg * B * I) \
    F_(h8sf, float, Eg * B * (I / 32)) F_(ye, uint16_t, Eg * B * D)                      \
    F_(sg, uint16_t, B * I) F_(su, uint16_t, B * I) F_(sh, uint16_t, B * I)             \
    F_(so, uint16_t, B * D) F_(rpos, int64_t, B) F_(rseq, int64_t, B)                  \
    F_(wstage, uint8_t, SB * TS__COMP_PAGE * 584)

/* WS_FIELDS' dimensions for B rows (every name it uses). */
typedef struct ws_dims { int64_t hc, D, nmix, H, QL, OG, IH, E, K, I, Eg, kmax, ext, SB; } ws_dims;

static ws_dims dims_of(const ts_model_config *c, int64_t B, bool local_experts_only) {
    ws_dims d;
    d.hc = c->hc_mult, d.D = c->dim, d.nmix = (2 + d.hc) * d.hc;
    d.H = c->n_heads, d.QL = c->q_lora_rank, d.OG = c->o_groups * c->o_lora_rank;
    d.IH = c->index_n_heads, d.E = c->n_routed_experts, d.K = c->n_activated_experts;
    d.I = c->moe_inter_dim;
    /* the grouped expert rows: an EP model's routed experts run in its Mega MoE buffer */
    d.Eg = local_experts_only ? 0 : d.E;
    d.kmax = d.D;
    const int64_t ks[4] = {d.QL, d.H * 512, d.OG, d.I};
    for (int i = 0; i < 4; i++) d.kmax = ks[i] > d.kmax ? ks[i] : d.kmax;
    d.ext = 1;
    for (int64_t L = 0; L < c->n_layers; L++) {
        const int64_t r = c->compress_ratios[L];
        const int64_t e = r == 4 ? ts__min64(c->index_topk, c->max_seq_len / 4)
                                 : r > 0 ? c->max_seq_len / r : 1;
        d.ext = e > d.ext ? e : d.ext;
    }
    /* a prefill chunk's window: the window - 1 rows before it and its own (v4 only) */
    d.SB = c->attention == TS_MODEL_ATTN_V4 ? ts__ceil_div(c->window_size - 1 + B, TS__COMP_PAGE) : 0;
    return d;
}

#define WS_DIMS(d_)                                                                        \
    const int64_t hc = d_.hc, D = d_.D, nmix = d_.nmix, H = d_.H, QL = d_.QL, OG = d_.OG,  \
                  IH = d_.IH, E = d_.E, K = d_.K, I = d_.I, Eg = d_.Eg, kmax = d_.kmax,    \
                  ext = d_.ext, SB = d_.SB

#define WS_COUNT(count) ((size_t)((count) > 0 ? (count) : 1))

size_t ts__model_ws_bytes(const ts_model_config *c, int64_t B, bool local_experts_only) {
    const ws_dims d = dims_of(c, B, local_experts_only);
    WS_DIMS(d);
    size_t n = 0;
#define SUM(name, type, count) n += WS_COUNT(count) * sizeof(type);
    WS_FIELDS(SUM)
#undef SUM
    return n;
}

/* The workspace for B rows into m->ws (left there, partly allocated, on failure). */
static ts_status ws_alloc_rows(ts_model *m, int64_t B, const char *fn) {
    const ts_model_config *c = &m->cfg;
    const ws_dims d = dims_of(c, B, m->local_experts_only);
    WS_DIMS(d);
    ts__ws *ws = (ts__ws *)calloc(1, sizeof *ws);
    if (!ws) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    m->ws = ws;
    ws->rows = B;
    ws->wstage_blocks = SB;
    ws->ext_max = ext;
    bool ok = true;
#define ALLOC(name, type, count)                                                   \
    ws->name = (type *)ts__aligned_alloc(WS_COUNT(count) * sizeof(type));          \
    if (ws->name) memset(ws->name, 0, WS_COUNT(count) * sizeof(type));             \
    ws->bytes += WS_COUNT(count) * sizeof(type);                                   \
    ok = ok && ws->name;
    WS_FIELDS(ALLOC)
#undef ALLOC
    if (!ok)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory (workspace of %lld rows)", fn,
                        (long long)B);
    /* the grouped GEMMs check every scale of the [E, n, ...] views, rows past masked_m too:
     * unused rows keep a valid scale */
    for (int64_t i = 0; i < Eg * B * (D / 32); i++) ws->gasf[i] = 1.0f;
    for (int64_t i = 0; i < Eg * B * (I / 32); i++) ws->h8sf[i] = 1.0f;
    if (c->attention == TS_MODEL_ATTN_V32) return ts__model_v32_ws_alloc(m);
    return TS_OK;
}

ts_status ts__model_ws_alloc(ts_model *m) {
    return ws_alloc_rows(m, m->max_batch, "ts_model_create");
}

ts_status ts__model_ws_reserve(ts_model *m, int64_t rows) {
    if (m->ws && m->ws->rows >= rows) return TS_OK;
    ts__ws *old = m->ws;
    m->ws = NULL;
    const ts_status st = ws_alloc_rows(m, rows, "ts_model_prefill");
    if (st != TS_OK) {
        ts__model_ws_free(m->ws);
        m->ws = old;
        return st;
    }
    ts__model_ws_free(old);
    return TS_OK;
}

void ts__model_ws_free(ts__ws *ws) {
    if (!ws) return;
    ts__model_v32_ws_free(ws);
#define FREE(name, type, count) ts__aligned_free(ws->name);
    WS_FIELDS(FREE)
#undef FREE
    free(ws);
}

ts_status ts__model_check_step(const ts_model *m, int64_t n, const int64_t *seqs,
                               const int32_t *tokens) {
    static const char fn[] = "ts_model_decode";
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (n < 0 || n > m->max_batch)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n = %lld is outside [0, max_batch = %lld]",
                        fn, (long long)n, (long long)m->max_batch);
    if (n == 0) return TS_OK;
    if (!seqs) return ts__fail(TS_ERR_NULL_POINTER, "%s: seqs is NULL", fn);
    if (!tokens) return ts__fail(TS_ERR_NULL_POINTER, "%s: tokens is NULL", fn);
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seqs[i];
        if (s < 0 || s >= m->max_batch)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: seqs[%lld] = %lld is outside [0, max_batch = %lld)", fn,
                            (long long)i, (long long)s, (long long)m->max_batch);
        for (int64_t j = 0; j < i; j++)
            if (seqs[j] == s)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: seqs[%lld] = seqs[%lld] = %lld "
                                "(sequences must be distinct)", fn, (long long)j, (long long)i,
                                (long long)s);
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: tokens[%lld] = %d is outside [0, vocab_size = %lld)", fn,
                            (long long)i, tokens[i], (long long)m->cfg.vocab_size);
        if (m->pos[s] >= m->cfg.max_seq_len)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: sequence %lld is at position %lld = max_seq_len (cache full)", fn,
                            (long long)s, (long long)m->pos[s]);
    }
    TS__RETURN_IF_ERROR(ts__model_check_pool(m, fn));
    if (!m->pages.table) return TS_OK;
    int64_t want = 0;
    for (int64_t i = 0; i < n; i++)
        want += ts__pages_missing(&m->pages, seqs[i], m->pos[seqs[i]] + 1);
    return ts__pages_enough(&m->pages, fn, want);
}

ts_status ts__model_check_pool(const ts_model *m, const char *fn) {
    if (m->v3 || m->cfg.attention != TS_MODEL_ATTN_V4 || m->pages.table) return TS_OK;
    return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: the model has no cache pool (a failed "
                    "ts_model_set_kv_pages left none)", fn);
}

ts_status ts_model_decode(ts_model *m, int64_t n, const int64_t *seqs, const int32_t *tokens,
                          float *logits) {
    /* an EP model's step is collective (model_ep.c agrees on the arguments first) */
    if (m && m->ep_decode) return m->ep_decode(m, n, seqs, tokens, logits);
    if (m && m->v3) return ts__v3_decode(m, n, seqs, tokens, logits);
    return ts__model_decode_local(m, n, seqs, tokens, logits);
}

ts_status ts__model_decode_local(ts_model *m, int64_t n, const int64_t *seqs,
                                 const int32_t *tokens, float *logits) {
    TS__RETURN_IF_ERROR(ts__model_check_step(m, n, seqs, tokens));
    if (n == 0) return TS_OK;
    int64_t *pos = m->ws->rpos;
    for (int64_t b = 0; b < n; b++) {
        pos[b] = m->pos[seqs[b]];
        if (m->pages.table) ts__pages_take(&m->pages, seqs[b], pos[b] + 1);
    }
    const ts__rows r = {n, seqs, pos, tokens, false};
    TS__RETURN_IF_ERROR(ts__model_forward(m, &r));
    for (int64_t b = 0; b < n; b++) m->pos[seqs[b]]++;
    return logits ? ts__model_head(m, 0, n, logits) : TS_OK;
}

ts_status ts__model_forward(ts_model *m, const ts__rows *r) {
    const ts_model_config *c = &m->cfg;
    ts__ws *ws = m->ws;
    ts__prof *pf = &m->prof;
    const int64_t n = r->n, hc = c->hc_mult, D = c->dim;
    const float eps = (float)c->norm_eps;
    /* every section here is idempotent (fresh outputs from unchanged inputs); hc_post writes
     * X2 and the swap stays outside its section */
    TS__PROF_SECTION(pf, TS__P_OTHER, (double)n * D * 2, 0,
        for (int64_t b = 0; b < n; b++)
            for (int64_t s = 0; s < hc; s++)
                memcpy(ws->X + (b * hc + s) * D, m->embed + (int64_t)r->tok[b] * D,
                       (size_t)D * sizeof(uint16_t)));
    for (int64_t L = 0; L < c->n_layers; L++) {
        const ts__layer *ly = &m->layers[L];
        for (int sub = 0; sub < 2; sub++) {
            TS__PROF_SECTION(pf, TS__P_HC, (double)(2 + hc) * hc * hc * D * 4,
                             2.0 * n * (2 + hc) * hc * hc * D,
                ts__model_hc_pre(m, ws->X, n, sub ? ly->hc_ffn_fn : ly->hc_attn_fn,
                                 sub ? ly->hc_ffn_base : ly->hc_attn_base,
                                 sub ? ly->hc_ffn_scale : ly->hc_attn_scale, ws->xf, ws->mixf,
                                 ws->mix, ws->y, ws->post, ws->comb);
                for (int64_t b = 0; b < n; b++)
                    ts__model_rmsnorm_bf16(ws->y + b * D, D, sub ? ly->ffn_norm : ly->attn_norm,
                                           eps, ws->a + b * D));
            if (sub == 0 && c->attention == TS_MODEL_ATTN_V32)
                TS__RETURN_IF_ERROR(ts__model_attention_v32(m, L, r, ws->a, ws->f));
            else if (sub == 0)
                TS__RETURN_IF_ERROR(ts__model_attention(m, L, r, ws->a, ws->f));
            else TS__RETURN_IF_ERROR(ts__model_moe(m, L, n, r->tok, ws->a, ws->f));
            TS__PROF_SECTION(pf, TS__P_HC, 0, 0,
                             ts__model_hc_post(m, ws->f, ws->X, n, ws->post, ws->comb, ws->X2));
            uint16_t *t = ws->X;
            ws->X = ws->X2;
            ws->X2 = t;
        }
    }
    return TS_OK;
}

ts_status ts__model_head(ts_model *m, int64_t row0, int64_t n, float *logits) {
    const ts_model_config *c = &m->cfg;
    ts__ws *ws = m->ws;
    ts__prof *pf = &m->prof;
    const int64_t D = c->dim;
    const float eps = (float)c->norm_eps;
    TS__PROF_SECTION(pf, TS__P_HEAD, (double)c->vocab_size * D * 2,
                     2.0 * n * c->vocab_size * D,
        ts__model_hc_head(m, ws->X + row0 * c->hc_mult * D, n, ws->xf, ws->mixf, ws->mix, ws->y);
        for (int64_t b = 0; b < n; b++)
            ts__model_rmsnorm_bf16(ws->y + b * D, D, m->norm, eps, ws->a + b * D);
        TS__RETURN_IF_ERROR(ts__model_linbf(m->head, c->vocab_size, D, ws->a, n, logits,
                                            c->vocab_size)));
    return TS_OK;
}
