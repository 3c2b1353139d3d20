/* V3.2 attention (docs/model.md §8) for a pass of rows (a decode batch or a prefill chunk,
 * ts__rows): MLA in absorbed form over the 656-byte FP8 cache, with the lightning indexer (FP8
 * q / keys, paged MQA logits over every cached token, top-k) choosing the rows of one sparse
 * FlashMLA call. Every GEMM sees M = n rows; the elementwise code runs per row in double and
 * rounds where §8 rounds. Both caches are indexed by position (nothing is overwritten), so
 * every row's key and latent row are stored before any row's indexer and attention read
 * them, a prefill chunk's rows included. */
#include "model_v32.h"

#include "tilestack/mqa_logits.h"
#include "tilestack/quant.h"
#include "tilestack/select.h"

#include <math.h>
#include <string.h>

#define PROF_T0(m) ((m)->prof.on ? ts__model_now() : 0.0)

void ts__model_rope_half(const float *cs, const float *sn, double *x) {
    for (int i = 0; i < 32; i++) {
        const double c = cs[i], s = sn[i];
        const double a = x[i], b = x[i + 32];
        x[i] = a * c - b * s;
        x[i + 32] = a * s + b * c;
    }
}

/* Every head at once: y[h][b][N] f32 = x_h[b][K] · W_hᵀ (packed bf16 [H, N, K]), where row b of
 * head h's input is x + h·head_stride + b·row_stride (a strided view, no gather); one masked
 * grouped GEMM, whose rows are bit for bit those of a per-head dense GEMM. */
static ts_status heads_gemm(ts__ws32 *w, ts_packed_weight *pw, int64_t H, int64_t N, int64_t K,
                            const uint16_t *x, int64_t n, int64_t head_stride,
                            int64_t row_stride) {
    ts_tensor a = ts_tensor_3d((void *)x, TS_BF16, H, n, K);
    a.strides[0] = head_stride;
    a.strides[1] = row_stride;
    ts_tensor d = ts_tensor_3d(w->t, TS_F32, H, n, N);
    for (int64_t h = 0; h < H; h++) w->masked[h] = (int32_t)n;
    ts_tensor mm = ts_tensor_1d(w->masked, TS_I32, H);
    return ts_m_grouped_bf16_gemm_masked_packed(&a, pw, &d, &mm, n, NULL);
}

/* bf16 -> double, RoPE / Hadamard in place, -> bf16 (the indexer's q heads and key). */
static void index_row(const ts_model *m, int64_t p, uint16_t *x16) {
    double x[128];
    for (int i = 0; i < 128; i++) x[i] = ts__bf16_to_f32_inl(x16[i]);
    ts__model_rope_half(m->rope_cos[0] + p * 32, m->rope_sin[0] + p * 32, x);
    for (int i = 0; i < 128; i++) x[i] = ts__bf16_to_f32_inl(ts__f32_to_bf16_inl((float)x[i]));
    ts__model_hadamard128(x);
    for (int i = 0; i < 128; i++) x16[i] = ts__f32_to_bf16_inl((float)x[i]);
}

static ts_status cast_fp8_rows(const uint16_t *x, int64_t rows, uint8_t *q, float *sf) {
    ts_tensor xt = ts_tensor_2d((void *)x, TS_BF16, rows, 128);
    ts_tensor qt = ts_tensor_2d(q, TS_E4M3, rows, 128);
    ts_tensor st = ts_tensor_2d(sf, TS_F32, rows, 1);
    return ts_per_token_cast_to_fp8(&xt, true, 128, false, &qt, &st);
}

static ts_status index_logits(ts_model *m, int64_t L, int64_t n, int32_t maxctx) {
    ts__ws32 *w = m->ws->v32;
    const ts_model_config *c = &m->cfg;
    const int64_t IH = c->index_n_heads, nb = ts__model_v32_blocks(c);
    int64_t sq[4] = {n, 1, IH, 128}, skv[4] = {m->max_batch * nb, TS__V32_PAGE, 1, TS__V32_IROW};
    ts_tensor q = ts_tensor_make(w->qi8, TS_E4M3, 4, sq);
    ts_tensor kv = ts_tensor_make(m->caches[L].ik32, TS_U8, 4, skv);
    ts_tensor wt = ts_tensor_2d(w->wi, TS_F32, n, IH);
    ts_tensor ctx = ts_tensor_2d(w->ctx, TS_I32, n, 1);
    ts_tensor bt = ts_tensor_2d(w->btab, TS_I32, n, nb);
    ts_tensor meta = ts_tensor_2d(w->sched, TS_I32, 2, 2);
    ts_tensor lg = ts_tensor_2d(w->logits, TS_F32, n, maxctx);
    lg.strides[0] = c->max_seq_len;
    TS__RETURN_IF_ERROR(ts_get_paged_mqa_logits_metadata(&ctx, TS__V32_PAGE, 1, &meta));
    return ts_fp8_fp4_paged_mqa_logits(&q, NULL, &kv, &wt, &ctx, &bt, &meta, maxctx, false, &lg);
}

static ts_status index_topk(ts_model *m, int64_t n, int32_t maxctx) {
    ts__ws32 *w = m->ws->v32;
    ts_tensor lg = ts_tensor_2d(w->logits, TS_F32, n, maxctx);
    lg.strides[0] = m->cfg.max_seq_len;
    ts_tensor end = ts_tensor_1d(w->ctx, TS_I32, n);
    ts_tensor off = ts_tensor_1d(w->off, TS_I32, n);
    ts_tensor ti = ts_tensor_2d(w->idx, TS_I32, n, w->K);
    ts_topk_options o = ts_topk_default_options();
    o.idx_oob_fill_value = -1;
    o.indices_type = TS_I32;
    o.return_value = false;
    return ts_topk(&lg, w->K, &o, &end, &off, NULL, &ti);
}

static ts_status flash(ts_model *m, int64_t L, int64_t n) {
    ts__ws32 *w = m->ws->v32;
    const int64_t H = m->cfg.n_heads, nb = ts__model_v32_blocks(&m->cfg);
    int64_t sq[4] = {n, 1, H, TS__V32_DQK};
    ts_tensor q = ts_tensor_make(w->qf, TS_BF16, 4, sq);
    int64_t sk[4] = {m->max_batch * nb, TS__V32_PAGE, 1, TS__V32_ROW};
    ts_tensor kc = ts_tensor_make(m->caches[L].kv32, TS_U8, 4, sk);
    int64_t si[3] = {n, 1, w->K};
    ts_tensor idx = ts_tensor_make(w->idx, TS_I32, 3, si);
    ts_tensor len = ts_tensor_1d(w->len, TS_I32, n);
    int64_t so[4] = {n, 1, H, TS__V32_LAT}, sl[3] = {n, H, 1};
    ts_tensor out = ts_tensor_make(w->olat, TS_BF16, 4, so);
    ts_tensor lse = ts_tensor_make(w->lse, TS_F32, 3, sl);
    ts_flash_mla_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &q;
    a.k_cache = &kc;
    a.head_dim_v = TS__V32_LAT;
    a.is_fp8_kvcache = true;
    a.indices = &idx;
    a.topk_length = &len;
    a.softmax_scale = (float)(1.0 / sqrt((double)TS__V32_QK));
    return ts__model_flash_mla(&a, &out, &lse);
}

ts_status ts__model_attention_v32(ts_model *m, int64_t L, const ts__rows *r,
                                  const uint16_t *a, uint16_t *out) {
    const int64_t n = r->n;
    const int64_t *seqs = r->seq;
    ts__ws *ws = m->ws;
    ts__ws32 *w = ws->v32;
    const ts_model_config *c = &m->cfg;
    const ts__v32_layer *v = m->layers[L].v32;
    ts__layer_cache *lc = &m->caches[L];
    const int64_t D = c->dim, H = c->n_heads, QL = c->q_lora_rank, IH = c->index_n_heads;
    const int64_t nb = ts__model_v32_blocks(c), QW = H * TS__V32_QK, QF = H * TS__V32_DQK;
    const float eps = (float)c->norm_eps;
    ts__prof *pf = &m->prof;
    double t0;

    /* 1. q: down-projection, q_norm, up-projection to heads x (nope 128 + rope 64) */
    TS__RETURN_IF_ERROR(ts__model_q_lora(m, &v->wq_a, v->q_norm, &v->wq_b, a, n, w->q, QW));
    /* RoPE of q_pe into the FlashMLA query's last 64 dims */
    TS__PROF_SECTION(pf, TS__P_ROPE, (double)n * H * 64 * 4, 0,
        for (int64_t b = 0; b < n; b++) {
            const int64_t p = r->pos[b];
            for (int64_t h = 0; h < H; h++) {
                const uint16_t *pe = w->q + b * QW + h * TS__V32_QK + TS__V32_NOPE;
                uint16_t *dst = w->qf + b * QF + h * TS__V32_DQK + TS__V32_LAT;
                double x[64];
                for (int i = 0; i < 64; i++) x[i] = ts__bf16_to_f32_inl(pe[i]);
                ts__model_rope(m->rope_cos[0] + p * 32, m->rope_sin[0] + p * 32, x, false);
                for (int i = 0; i < 64; i++) dst[i] = ts__f32_to_bf16_inl((float)x[i]);
            }
        });
    /* absorb: q̃_h = bf16(q_nope_h · W_UK_h), 512-wide, one grouped bf16 GEMM over the heads */
    TS__PROF_SECTION(pf, TS__P_LINBF, (double)H * TS__V32_LAT * TS__V32_NOPE * 2,
                     2.0 * n * H * TS__V32_LAT * TS__V32_NOPE,
        TS__RETURN_IF_ERROR(heads_gemm(w, v->uk, H, TS__V32_LAT, TS__V32_NOPE, w->q, n,
                                       TS__V32_QK, QW));
        for (int64_t h = 0; h < H; h++)
            for (int64_t b = 0; b < n; b++)
                for (int i = 0; i < TS__V32_LAT; i++)
                    w->qf[b * QF + h * TS__V32_DQK + i] =
                        ts__f32_to_bf16_inl(w->t[(h * n + b) * TS__V32_LAT + i]));

    /* 2. kv: latent 512 (kv_norm) + rope 64, stored in the 656-byte cache at position p */
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &v->wkv_a, a, n, D, w->kv0, TS__V32_DQK));
    t0 = PROF_T0(m);
    for (int64_t b = 0; b < n; b++) {
        const int64_t s = seqs[b], p = r->pos[b];
        uint16_t *kv = w->kv + b * TS__V32_DQK;
        const uint16_t *kv0 = w->kv0 + b * TS__V32_DQK;
        ts__model_rmsnorm_bf16(kv0, TS__V32_LAT, v->kv_norm, eps, kv);
        double x[64];
        for (int i = 0; i < 64; i++) x[i] = ts__bf16_to_f32_inl(kv0[TS__V32_LAT + i]);
        ts__model_rope(m->rope_cos[0] + p * 32, m->rope_sin[0] + p * 32, x, false);
        for (int i = 0; i < 64; i++) kv[TS__V32_LAT + i] = ts__f32_to_bf16_inl((float)x[i]);
        TS__RETURN_IF_ERROR(ts__model_v32_kv_store(lc->kv32, s * nb * TS__V32_PAGE + p, kv));
    }
    ts__prof_add(pf, TS__P_KVQ, t0, (double)n * TS__V32_ROW, 0);

    /* 3. indexer: q heads and the token's key (RoPE, Hadamard, FP8), weights, logits, top-k */
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &v->iwq_b, ws->qr, n, QL, w->qi, IH * 128));
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &v->iwk, a, n, D, w->k, 128));
    t0 = PROF_T0(m);
    int32_t maxctx = 0;
    for (int64_t b = 0; b < n; b++) {
        const int64_t s = seqs[b], p = r->pos[b];
        for (int64_t h = 0; h < IH; h++) index_row(m, p, w->qi + (b * IH + h) * 128);
        /* LayerNorm (weight and bias) of the key, in double */
        uint16_t *k = w->k + b * 128;
        double mean = 0, var = 0;
        for (int i = 0; i < 128; i++) mean += ts__bf16_to_f32_inl(k[i]);
        mean /= 128.0;
        for (int i = 0; i < 128; i++) {
            const double d = ts__bf16_to_f32_inl(k[i]) - mean;
            var += d * d;
        }
        const double rstd = 1.0 / sqrt(var / 128.0 + (double)eps);
        for (int i = 0; i < 128; i++)
            k[i] = ts__f32_to_bf16_inl(
                (float)((ts__bf16_to_f32_inl(k[i]) - mean) * rstd * v->ik_norm[i] + v->ik_bias[i]));
        index_row(m, p, k);
        TS__RETURN_IF_ERROR(cast_fp8_rows(k, 1, w->k8 + b * 128, w->ks + b));
        ts__model_v32_key_store(lc->ik32, s * nb * TS__V32_PAGE + p, w->k8 + b * 128, w->ks[b]);
        w->ctx[b] = (int32_t)(p + 1);
        w->off[b] = (int32_t)(s * nb * TS__V32_PAGE);
        for (int64_t j = 0; j < nb; j++) w->btab[b * nb + j] = (int32_t)(s * nb + j);
        maxctx = w->ctx[b] > maxctx ? w->ctx[b] : maxctx;
    }
    TS__RETURN_IF_ERROR(cast_fp8_rows(w->qi, n * IH, w->qi8, w->qis));
    ts__prof_add(pf, TS__P_KVQ, t0, (double)n * TS__V32_IROW, 0);
    const double cw = (1.0 / sqrt(128.0)) * (1.0 / sqrt((double)IH));
    double ctx_sum = 0;
    for (int64_t b = 0; b < n; b++) ctx_sum += w->ctx[b];
    TS__PROF_SECTION(pf, TS__P_INDEXER, ctx_sum * TS__V32_IROW + (double)IH * D * 2,
                     2.0 * ctx_sum * IH * 128 + 2.0 * n * IH * D,
        TS__RETURN_IF_ERROR(ts__model_linbf(v->weights_proj, IH, D, a, n, w->wi, IH));
        for (int64_t i = 0; i < n * IH; i++) w->wi[i] = (float)(w->wi[i] * cw * w->qis[i]);
        TS__RETURN_IF_ERROR(index_logits(m, L, n, maxctx)));
    TS__PROF_SECTION(pf, TS__P_TOPK, ctx_sum * 4, 0,
        TS__RETURN_IF_ERROR(index_topk(m, n, maxctx));
        for (int64_t b = 0; b < n; b++) w->len[b] = (int32_t)ts__min64(w->K, w->ctx[b]));

    /* 4. sparse MLA over the chosen rows, softmax scale 192^-1/2 */
    {
        double toks = 0;
        for (int64_t b = 0; b < n; b++) toks += w->len[b];
        TS__PROF_SECTION(pf, TS__P_ATTN, toks * TS__V32_ROW + (double)n * H * TS__V32_DQK * 2,
                         toks * H * (TS__V32_DQK + TS__V32_LAT) * 2.0,
                         TS__RETURN_IF_ERROR(flash(m, L, n)));
    }
    /* 5. W_UV (one grouped GEMM over the heads), then wo */
    TS__PROF_SECTION(pf, TS__P_LINBF, (double)H * TS__V32_LAT * TS__V32_V * 2,
                     2.0 * n * H * TS__V32_LAT * TS__V32_V,
        TS__RETURN_IF_ERROR(heads_gemm(w, v->uv, H, TS__V32_V, TS__V32_LAT, w->olat, n,
                                       TS__V32_LAT, H * TS__V32_LAT));
        for (int64_t h = 0; h < H; h++)
            for (int64_t b = 0; b < n; b++)
                for (int i = 0; i < TS__V32_V; i++)
                    w->ov[b * H * TS__V32_V + h * TS__V32_V + i] =
                        ts__f32_to_bf16_inl(w->t[(h * n + b) * TS__V32_V + i]));
    return ts__model_lin8(ws, pf, &v->wo, w->ov, n, H * TS__V32_V, out, D);
}
