/* V4 attention (docs/model.md §4 "Attention", steps 1-6) for a pass of rows (a decode batch or
 * a prefill chunk, ts__rows): q / kv projections, RoPE, the window ring, the compressors, the
 * CSA indexer (FP4 MQA logits + top-k), sparse FlashMLA over window + compressed rows with the
 * sink, inverse RoPE, and the grouped low-rank output projection. Every GEMM sees M = n rows;
 * every cache write of the rows comes before the attention, which is correct because a row
 * at position p reads only rows <= p (the window ring excepted: window_rows). */
#include "model_internal.h"

#include "tilestack/mqa_logits.h"
#include "tilestack/quant.h"
#include "tilestack/select.h"

#include <math.h>
#include <string.h>

#define PROF_T0(m) ((m)->prof.on ? ts__model_now() : 0.0)

/* softmax over the entries of two slot sets (previous block, then current) of one channel:
 * scores s*, values v*, n* slots, `stride` floats between slots. */
static double pool2(const float *s0, const float *v0, int64_t n0, const float *s1,
                    const float *v1, int64_t n1, int64_t stride) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < n0; j++) mx = s0[j * stride] > mx ? s0[j * stride] : mx;
    for (int64_t j = 0; j < n1; j++) mx = s1[j * stride] > mx ? s1[j * stride] : mx;
    double den = 0, num = 0;
    for (int64_t j = 0; j < n0; j++) {
        const double e = exp(s0[j * stride] - mx);
        den += e;
        num += e * v0[j * stride];
    }
    for (int64_t j = 0; j < n1; j++) {
        const double e = exp(s1[j * stride] - mx);
        den += e;
        num += e * v1[j * stride];
    }
    return num / den;
}

double ts__model_softmax_pool(const float *score, const float *kv, int64_t nslot, int64_t stride,
                              int64_t c) {
    return pool2(score + c, kv + c, nslot, NULL, NULL, 0, stride);
}

/* H·x / sqrt(128), Sylvester order (H_ij = (-1)^popcount(i & j)), by the butterfly. */
void ts__model_hadamard128(double *x) {
    for (int h = 1; h < 128; h *= 2)
        for (int i = 0; i < 128; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const double s = sqrt(128.0);
    for (int i = 0; i < 128; i++) x[i] /= s;
}

static ts_status fp4_row(const double *xd, uint8_t *q, int32_t *sf) {
    float x[128];
    for (int i = 0; i < 128; i++) x[i] = (float)xd[i];
    const int64_t rows = 1;
    ts_tensor xt = ts_tensor_2d(x, TS_F32, rows, 128);
    ts_tensor qt = ts_tensor_2d(q, TS_E2M1X2, rows, 64);
    ts_tensor st = ts_tensor_2d(sf, TS_I32, rows, 1);
    return ts_per_token_cast_to_fp4(&xt, true, 32, true, TS_FP4_ROUND_DEEPGEMM, &qt, &st);
}

/* Stores (k, g + ape) of position p in the state; when the block closes, writes the pooled,
 * normalised, rotated row to out_bf16 [d] (rotated dims: the last 64) and returns true. */
static bool compress_step(const ts_model *m, const ts__compressor *cp, ts__comp_state *st,
                          const float *k, const float *g, int64_t p, uint16_t *out_bf16,
                          double *out_f64) {
    const int64_t r = cp->ratio, w = cp->coff * cp->d, blk = r * w, d = cp->d;
    const int64_t j = p % r;
    const float *ape = cp->ape + j * w;
    for (int64_t c = 0; c < w; c++) {
        st->kv[blk + j * w + c] = k[c];
        st->score[blk + j * w + c] = g[c] + ape[c];
    }
    if ((p + 1) % r != 0) return false;
    uint16_t row[512];
    for (int64_t c = 0; c < d; c++) {
        double v;
        if (cp->coff == 2)
            v = pool2(st->score + c, st->kv + c, r, st->score + blk + d + c, st->kv + blk + d + c,
                      r, w);
        else
            v = pool2(st->score + blk + c, st->kv + blk + c, r, NULL, NULL, 0, w);
        row[c] = ts__f32_to_bf16_inl((float)v);
    }
    if (cp->coff == 2) {
        memcpy(st->kv, st->kv + blk, (size_t)blk * sizeof(float));
        memcpy(st->score, st->score + blk, (size_t)blk * sizeof(float));
    }
    ts__model_rmsnorm_bf16(row, d, cp->norm, (float)m->cfg.norm_eps, out_bf16);
    const int64_t pr = p + 1 - r;
    double t[64];
    for (int i = 0; i < 64; i++) t[i] = ts__bf16_to_f32_inl(out_bf16[d - 64 + i]);
    ts__model_rope(m->rope_cos[1] + pr * 32, m->rope_sin[1] + pr * 32, t, false);
    if (out_f64) {
        for (int64_t c = 0; c < d - 64; c++) out_f64[c] = ts__bf16_to_f32_inl(out_bf16[c]);
        for (int i = 0; i < 64; i++) out_f64[d - 64 + i] = t[i];
    }
    for (int i = 0; i < 64; i++) out_bf16[d - 64 + i] = ts__f32_to_bf16_inl((float)t[i]);
    return true;
}

ts_status ts__model_flash_mla(ts_flash_mla_kvcache_args *a, ts_tensor *out, ts_tensor *lse) {
    ts_mla_metadata *meta = NULL;
    TS__RETURN_IF_ERROR(ts_get_mla_metadata(&meta));
    a->tile_scheduler_metadata = meta;
    const ts_status st = ts_flash_mla_with_kvcache(a, out, lse);
    ts_mla_metadata_free(meta);
    return st;
}

ts_status ts__model_q_lora(ts_model *m, const ts__lin8 *wq_a, const float *q_norm,
                           const ts__lin8 *wq_b, const uint16_t *a, int64_t n, uint16_t *q,
                           int64_t qw) {
    ts__ws *ws = m->ws;
    ts__prof *pf = &m->prof;
    const int64_t D = m->cfg.dim, QL = m->cfg.q_lora_rank;
    const float eps = (float)m->cfg.norm_eps;
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, wq_a, a, n, D, ws->qr0, QL));
    TS__PROF_SECTION(pf, TS__P_NORM, (double)n * QL * 4, 0,
        for (int64_t b = 0; b < n; b++)
            ts__model_rmsnorm_bf16(ws->qr0 + b * QL, QL, q_norm, eps, ws->qr + b * QL));
    return ts__model_lin8(ws, pf, wq_b, ws->qr, n, QL, q, qw);
}

/* Step 2: each row's kv (norm, RoPE) is stored, and its window token list made: positions
 * max(0, p - W + 1) .. p ascending, as slots of the cache flash() reads. A decode row stores
 * into its sequence's ring at p mod W and reads the ring. A prefill chunk cannot: its later
 * rows would overwrite ring rows that its earlier rows still see. It reads ws->wstage instead:
 * the W - 1 positions before the chunk copied from the ring (the same bytes), then its own
 * rows; the ring then takes the chunk's last min(n, W) rows (copied: the bytes a decode step
 * stores). */
static ts_status window_rows(ts_model *m, int64_t L, const ts__rows *r) {
    ts__ws *ws = m->ws;
    const ts__layer *ly = &m->layers[L];
    ts__layer_cache *lc = &m->caches[L];
    const int64_t n = r->n, W = m->cfg.window_size, tab = ly->ratio > 0 ? 1 : 0;
    const float eps = (float)m->cfg.norm_eps;
    for (int64_t b = 0; b < n; b++) {
        const int64_t p = r->pos[b];
        uint16_t *kv = ws->kv + b * 512;
        ts__model_rmsnorm_bf16(ws->kv0 + b * 512, 512, ly->kv_norm, eps, kv);
        double x[64];
        for (int i = 0; i < 64; i++) x[i] = ts__bf16_to_f32_inl(kv[448 + i]);
        ts__model_rope(m->rope_cos[tab] + p * 32, m->rope_sin[tab] + p * 32, x, false);
        for (int i = 0; i < 64; i++) kv[448 + i] = ts__f32_to_bf16_inl((float)x[i]);
    }
    /* prefill: position t's staging slot is t - first, `first` the oldest position the chunk's
     * first row sees */
    const int64_t P = TS__COMP_PAGE, s0 = r->seq[0], p0 = r->pos[0];
    const int64_t before = ts__min64(p0, W - 1), first = p0 - before;
    if (r->one_seq) {
        for (int64_t t = first; t < p0; t++)
            ts__model_kv_copy(ws->wstage, P, t - first, lc->win, W, s0 * W + t % W);
    }
    for (int64_t b = 0; b < n; b++) {
        const int64_t s = r->seq[b], p = r->pos[b];
        if (r->one_seq)
            TS__RETURN_IF_ERROR(ts__model_kv_store(ws->wstage, P, before + b, ws->kv + b * 512));
        else
            TS__RETURN_IF_ERROR(ts__model_kv_store(lc->win, W, s * W + p % W, ws->kv + b * 512));
        const int64_t t0w = p - W + 1 > 0 ? p - W + 1 : 0;
        int32_t *wi = ws->win_idx + b * W;
        int64_t k = 0;
        for (int64_t t = t0w; t <= p; t++)
            wi[k++] = (int32_t)(r->one_seq ? t - first : s * W + t % W);
        ws->win_len[b] = (int32_t)k;
        for (; k < W; k++) wi[k] = -1;
    }
    if (r->one_seq) {
        for (int64_t t = ts__max64(p0, p0 + n - W); t < p0 + n; t++)
            ts__model_kv_copy(lc->win, W, s0 * W + t % W, ws->wstage, P, t - first);
    }
    return TS_OK;
}

static ts_status flash(ts_model *m, int64_t L, int64_t n, bool staged, const float *sink) {
    ts__ws *ws = m->ws;
    const ts_model_config *c = &m->cfg;
    const int64_t H = c->n_heads, W = c->window_size, r = m->layers[L].ratio;
    const ts__layer_cache *lc = &m->caches[L];
    int64_t sq[4] = {n, 1, H, 512};
    ts_tensor q = ts_tensor_make(ws->q, TS_BF16, 4, sq);
    /* the window rows: the ring, or a prefill chunk's staging (window_rows) */
    int64_t sk[4] = {m->max_batch, W, 1, 584};
    if (staged) {
        sk[0] = ws->wstage_blocks;
        sk[1] = TS__COMP_PAGE;
    }
    ts_tensor kc = ts_tensor_make(staged ? ws->wstage : lc->win, TS_U8, 4, sk);
    int64_t si[3] = {n, 1, W};
    ts_tensor idx = ts_tensor_make(ws->win_idx, TS_I32, 3, si);
    ts_tensor len = ts_tensor_1d(ws->win_len, TS_I32, n);
    ts_tensor snk = ts_tensor_1d((void *)sink, TS_F32, H);
    ts_tensor ekc, eidx, elen;
    ts_flash_mla_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &q;
    a.k_cache = &kc;
    a.head_dim_v = 512;
    a.is_fp8_kvcache = true;
    a.indices = &idx;
    a.attn_sink = &snk;
    a.topk_length = &len;
    if (r > 0) {
        const int64_t ext = r == 4 ? ts__min64(c->index_topk, c->max_seq_len / 4) : c->max_seq_len / r;
        int64_t sek[4] = {m->pages.total, m->pages.page_tokens / r, 1, 584};
        ekc = ts_tensor_make(lc->comp, TS_U8, 4, sek);
        int64_t sei[3] = {n, 1, ext};
        eidx = ts_tensor_make(ws->ext_idx, TS_I32, 3, sei);
        elen = ts_tensor_1d(ws->ext_len, TS_I32, n);
        a.extra_k_cache = &ekc;
        a.extra_indices_in_kvcache = &eidx;
        a.extra_topk_length = &elen;
    }
    int64_t so[4] = {n, 1, H, 512}, sl[3] = {n, H, 1};
    ts_tensor out = ts_tensor_make(ws->o, TS_BF16, 4, so);
    ts_tensor lse = ts_tensor_make(ws->lse, TS_F32, 3, sl);
    return ts__model_flash_mla(&a, &out, &lse);
}

ts_status ts__model_attention(ts_model *m, int64_t L, const ts__rows *rw, const uint16_t *a,
                              uint16_t *out) {
    const int64_t n = rw->n;
    const int64_t *seqs = rw->seq;
    ts__ws *ws = m->ws;
    const ts_model_config *c = &m->cfg;
    const ts__layer *ly = &m->layers[L];
    ts__layer_cache *lc = &m->caches[L];
    const int64_t D = c->dim, H = c->n_heads, QL = c->q_lora_rank;
    const int64_t r = ly->ratio, tab = r > 0 ? 1 : 0;
    const float eps = (float)c->norm_eps;
    ts__prof *pf = &m->prof;
    double t0;

    /* 1. q */
    TS__RETURN_IF_ERROR(
        ts__model_q_lora(m, &ly->wq_a, ly->q_norm, &ly->wq_b, a, n, ws->q, H * 512));
    /* q's norm + RoPE in place: not re-runnable (the replay keeps its in-step time) */
    t0 = PROF_T0(m);
    for (int64_t b = 0; b < n; b++) {
        const int64_t p = rw->pos[b];
        for (int64_t h = 0; h < H; h++) {
            uint16_t *qh = ws->q + (b * H + h) * 512;
            float xf[512];
            double x[512];
            for (int i = 0; i < 512; i++) xf[i] = ts__bf16_to_f32_inl(qh[i]);
            const double rr = ts__model_rms(xf, 512, eps);
            for (int i = 0; i < 512; i++) x[i] = xf[i] * rr;
            ts__model_rope(m->rope_cos[tab] + p * 32, m->rope_sin[tab] + p * 32, x + 448, false);
            for (int i = 0; i < 512; i++) qh[i] = ts__f32_to_bf16_inl((float)x[i]);
        }
    }
    ts__prof_add(pf, TS__P_ROPE, t0, (double)n * H * 512 * 4, 0);

    /* 2. kv into the window (the ring, or a prefill chunk's staging) */
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->wkv, a, n, D, ws->kv0, 512));
    t0 = PROF_T0(m);
    TS__RETURN_IF_ERROR(window_rows(m, L, rw));
    ts__prof_add(pf, TS__P_KVQ, t0, (double)n * 584, 0);

    /* 3. compressor (f32) */
    if (r > 0) {
        const ts__compressor *cp = &ly->comp;
        const int64_t w = cp->coff * 512;
        float *af = ws->xf;
        TS__PROF_SECTION(pf, TS__P_LIN32, (double)(2 * w + (r == 4 ? 512 : 0)) * D * 4,
                         2.0 * n * (2 * w + (r == 4 ? 512 : 0)) * D,
            for (int64_t i = 0; i < n * D; i++) af[i] = ts__bf16_to_f32_inl(a[i]);
            ts__model_gemv_f32(af, n, D, cp->wkv, w, D, ws->ck, w);
            ts__model_gemv_f32(af, n, D, cp->wgate, w, D, ws->cg, w);
            if (r == 4) {
                ts__model_gemv_f32(af, n, D, ly->icomp.wkv, 256, D, ws->ik, 256);
                ts__model_gemv_f32(af, n, D, ly->icomp.wgate, 256, D, ws->ig, 256);
            });
        /* the compressor states and cache rows: not re-runnable */
        t0 = PROF_T0(m);
        const ts__pages *pg = &m->pages;
        const int64_t rpp = pg->page_tokens / r, irpp = pg->page_tokens / 4;
        for (int64_t b = 0; b < n; b++) {
            const int64_t s = seqs[b], p = rw->pos[b];
            uint16_t row[512];
            if (compress_step(m, cp, &lc->cs[s], ws->ck + b * w, ws->cg + b * w, p, row, NULL))
                TS__RETURN_IF_ERROR(ts__model_kv_store(lc->comp, rpp,
                                                       ts__pages_row(pg, s, p / r, rpp), row));
            if (r == 4) {
                double rf[128];
                uint16_t irow[128];
                if (compress_step(m, &ly->icomp, &lc->ics[s], ws->ik + b * 256, ws->ig + b * 256,
                                  p, irow, rf)) {
                    ts__model_hadamard128(rf);
                    const int64_t ir = ts__pages_row(pg, s, p / 4, irpp);
                    TS__RETURN_IF_ERROR(fp4_row(rf, lc->icache + ir * 64, lc->icache_sf + ir));
                }
            }
        }
        ts__prof_add(pf, TS__P_COMPRESS, t0, 0, 0);
    }

    /* 4. indexer, 5. extra rows */
    if (r == 4) {
        const int64_t IH = c->index_n_heads, rows = c->max_seq_len / 4;
        const int64_t K = ts__min64(c->index_topk, rows);
        TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->iwq_b, ws->qr, n, QL, ws->qi, IH * 128));
        const double cw = (1.0 / sqrt(128.0)) * (1.0 / sqrt((double)IH));
        /* idempotent: wi is rewritten by the GEMM before its scaling */
        TS__PROF_SECTION(pf, TS__P_INDEXER, 0, 0,
            TS__RETURN_IF_ERROR(ts__model_linbf(ly->weights_proj, IH, D, a, n, ws->wi, IH));
            for (int64_t i = 0; i < n * IH; i++) ws->wi[i] = (float)(ws->wi[i] * cw);
            for (int64_t b = 0; b < n; b++) {
                const int64_t p = rw->pos[b];
                for (int64_t h = 0; h < IH; h++) {
                    double x[128];
                    const uint16_t *qh = ws->qi + (b * IH + h) * 128;
                    for (int i = 0; i < 128; i++) x[i] = ts__bf16_to_f32_inl(qh[i]);
                    ts__model_rope(m->rope_cos[1] + p * 32, m->rope_sin[1] + p * 32, x + 64,
                                   false);
                    ts__model_hadamard128(x);
                    TS__RETURN_IF_ERROR(fp4_row(x, ws->qi4 + (b * IH + h) * 64,
                                                 ws->qi4sf + b * IH + h));
                }
            });
        for (int64_t b = 0; b < n; b++) {
            const int64_t s = seqs[b], p = rw->pos[b], nr = (p + 1) / 4;
            int32_t *ei = ws->ext_idx + b * K;
            for (int64_t k = 0; k < K; k++) ei[k] = -1;
            ws->ext_len[b] = 0;
            if (nr == 0) continue;
            int64_t sq[3] = {1, IH, 64};
            ts_tensor q = ts_tensor_make(ws->qi4 + b * IH * 64, TS_E2M1X2, 3, sq);
            ts_tensor qsf = ts_tensor_2d(ws->qi4sf + b * IH, TS_I32, 1, IH);
            /* the sequence's rows from its pages, in order (the logits kernel reads them
             * contiguous: 68 bytes a row against IH x 128 multiply-adds) */
            const int64_t irpp = m->pages.page_tokens / 4;
            for (int64_t j = 0; j < nr; j += irpp) {
                const int64_t ir = ts__pages_row(&m->pages, s, j, irpp), k = ts__min64(irpp, nr - j);
                memcpy(ws->ikeys + j * 64, lc->icache + ir * 64, (size_t)(k * 64));
                memcpy(ws->ikeys_sf + j, lc->icache_sf + ir, (size_t)k * sizeof(int32_t));
            }
            ts_tensor kv = ts_tensor_2d(ws->ikeys, TS_E2M1X2, nr, 64);
            ts_tensor kvsf = ts_tensor_1d(ws->ikeys_sf, TS_I32, nr);
            ts_tensor wt = ts_tensor_2d(ws->wi + b * IH, TS_F32, 1, IH);
            int32_t ks = 0, ke = (int32_t)nr;
            ts_tensor kst = ts_tensor_1d(&ks, TS_I32, 1), ket = ts_tensor_1d(&ke, TS_I32, 1);
            ts_tensor lg = ts_tensor_2d(ws->ilogits, TS_F32, 1, nr);
            TS__PROF_SECTION(pf, TS__P_INDEXER, (double)nr * 68, 2.0 * nr * IH * 128,
                TS__RETURN_IF_ERROR(ts_fp8_fp4_mqa_logits(&q, &qsf, &kv, &kvsf, &wt, &kst,
                                                          &ket, false, 0, &lg)));
            ts_topk_options o = ts_topk_default_options();
            o.idx_oob_fill_value = -1;
            o.indices_type = TS_I32;
            o.return_value = false;
            ts_tensor ti = ts_tensor_2d(ws->itopk, TS_I32, 1, K);
            const int64_t kk = ts__min64(K, nr), rpp = m->pages.page_tokens / 4;
            TS__PROF_SECTION(pf, TS__P_TOPK, 0, 0,
                TS__RETURN_IF_ERROR(ts_topk(&lg, K, &o, NULL, NULL, NULL, &ti));
                for (int64_t k = 0; k < kk; k++)
                    ei[k] = (int32_t)ts__pages_row(&m->pages, s, ws->itopk[k], rpp);
                ws->ext_len[b] = (int32_t)kk);
        }
    } else if (r > 0) {
        const int64_t K = c->max_seq_len / r;
        for (int64_t b = 0; b < n; b++) {
            const int64_t s = seqs[b], p = rw->pos[b], nr = (p + 1) / r;
            const int64_t rpp = m->pages.page_tokens / r;
            int32_t *ei = ws->ext_idx + b * K;
            for (int64_t k = 0; k < K; k++)
                ei[k] = k < nr ? (int32_t)ts__pages_row(&m->pages, s, k, rpp) : -1;
            ws->ext_len[b] = (int32_t)nr;
        }
    }

    {
        double toks = 0;
        for (int64_t b = 0; b < n; b++) toks += ws->win_len[b] + (r > 0 ? ws->ext_len[b] : 0);
        TS__PROF_SECTION(pf, TS__P_ATTN, toks * 584 + (double)n * H * 512 * 4,
                         toks * H * 512 * 4.0,
                         TS__RETURN_IF_ERROR(flash(m, L, n, rw->one_seq, ly->attn_sink)));
    }
    /* inverse RoPE on the output, in place: not re-runnable */
    t0 = PROF_T0(m);
    for (int64_t b = 0; b < n; b++) {
        const int64_t p = rw->pos[b];
        for (int64_t h = 0; h < H; h++) {
            uint16_t *oh = ws->o + (b * H + h) * 512 + 448;
            double x[64];
            for (int i = 0; i < 64; i++) x[i] = ts__bf16_to_f32_inl(oh[i]);
            ts__model_rope(m->rope_cos[tab] + p * 32, m->rope_sin[tab] + p * 32, x, true);
            for (int i = 0; i < 64; i++) oh[i] = ts__f32_to_bf16_inl((float)x[i]);
        }
    }
    ts__prof_add(pf, TS__P_ROPE, t0, 0, 0);

    /* 6. grouped output projection */
    const int64_t G = c->o_groups, hpg = H / G, OL = c->o_lora_rank;
    for (int64_t g = 0; g < G; g++)
        TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->wo_a[g], ws->o + g * hpg * 512, n,
                                           H * 512, ws->z + g * OL, G * OL));
    return ts__model_lin8(ws, pf, &ly->wo_b, ws->z, n, G * OL, out, D);
}
