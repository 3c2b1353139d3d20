/* MoE (docs/model.md §4 "MoE"): gate scores, routing (bias for selection only, hash layers),
 * the routed experts through the M-grouped masked FP8 x FP4 GEMM (recipe (1, 1, 32)) with the
 * SwiGLU / routing weight / FP8 requantisation between them, and the FP8 shared expert. */
#include "model_internal.h"

#include "numerics/swiglu_cast.h"
#include "tilestack/quant.h"

#include <math.h>
#include <string.h>

ts_status ts__moe_swiglu_weight_cast(const uint16_t *gate, const uint16_t *up, int64_t ld,
                                     const float *weights, int64_t m, int64_t inter,
                                     float limit, float *tmp, uint8_t *out, float *sf) {
    (void)tmp;
    ts__swiglu_weight_cast(gate, up, ld, m, inter, weights, limit > 0 ? limit : INFINITY, false,
                           out, inter, NULL, 0, sf, inter / 32);
    return TS_OK;
}

static double score_of(ts_model_score_func f, double s) {
    if (f == TS_MODEL_SCORE_SIGMOID) return 1.0 / (1.0 + exp(-s));
    /* log1p(exp(s)) == s in double once s > 37: avoids exp's overflow */
    const double sp = s > 40.0 ? s : log1p(exp(s));
    return sqrt(sp);
}

void ts__model_route(const ts_model_config *cfg, const float *s, const float *bias,
                     const int32_t *hash_row, int64_t E, int64_t topk, int32_t *idx, float *w) {
    double buf[1024];
    double *sc = E <= 1024 ? buf : (double *)malloc((size_t)E * sizeof(double));
    TS__ASSERT(sc);
    if (cfg->score_func == TS_MODEL_SCORE_SOFTMAX) {
        double mx = s[0];
        for (int64_t e = 1; e < E; e++) mx = s[e] > mx ? s[e] : mx;
        double sum = 0;
        for (int64_t e = 0; e < E; e++) {
            sc[e] = exp(s[e] - mx);
            sum += sc[e];
        }
        for (int64_t e = 0; e < E; e++) sc[e] = sc[e] / sum;
    } else {
        for (int64_t e = 0; e < E; e++) sc[e] = score_of(cfg->score_func, s[e]);
    }
    if (hash_row) {
        for (int64_t j = 0; j < topk; j++) idx[j] = hash_row[j];
    } else {
        /* descending sc + bias, ties: lower expert id */
        for (int64_t j = 0; j < topk; j++) {
            int64_t best = -1;
            double bv = 0;
            for (int64_t e = 0; e < E; e++) {
                bool used = false;
                for (int64_t k = 0; k < j; k++) used |= idx[k] == e;
                if (used) continue;
                const double v = sc[e] + (bias ? (double)bias[e] : 0.0);
                if (best < 0 || v > bv) {
                    best = e;
                    bv = v;
                }
            }
            idx[j] = (int32_t)best;
        }
    }
    const double rs = cfg->route_scale;
    if (cfg->score_func == TS_MODEL_SCORE_SOFTMAX) {
        for (int64_t j = 0; j < topk; j++) w[j] = sc[idx[j]] * rs;
    } else {
        double sum = 0;
        for (int64_t j = 0; j < topk; j++) sum += sc[idx[j]];
        for (int64_t j = 0; j < topk; j++) w[j] = sc[idx[j]] / sum * rs;
    }
    if (sc != buf) free(sc);
}

/* The two SwiGLUs over threads: per expert group (routed; claimed dynamically, the groups'
 * sizes differ) and per row (shared). Each row's arithmetic is the serial one, so the bits do
 * not depend on the split; it matters for a prefill chunk's hundreds of rows. */
typedef struct swiglu_ctx {
    const ts_model *m;
    const float *roww;
    float limit;
    int64_t n;
} swiglu_ctx;

static void routed_swiglu(void *vctx, int64_t e0, int64_t e1, int tid) {
    (void)tid;
    const swiglu_ctx *c = (const swiglu_ctx *)vctx;
    ts__ws *ws = c->m->ws;
    const int64_t n = c->n, I = c->m->cfg.moe_inter_dim;
    for (int64_t e = e0; e < e1; e++) {
        if (ws->masked_m[e] == 0) continue;
        (void)ts__moe_swiglu_weight_cast(ws->gate + e * n * I, ws->up + e * n * I, I,
                                         c->roww + e * n, ws->masked_m[e], I, c->limit, NULL,
                                         ws->h8 + e * n * I, ws->h8sf + e * n * (I / 32));
    }
}

static void shared_swiglu(void *vctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const swiglu_ctx *c = (const swiglu_ctx *)vctx;
    ts__ws *ws = c->m->ws;
    const int64_t I = c->m->cfg.moe_inter_dim;
    const double limit = c->limit;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t i = 0; i < I; i++) {
            double g = ts__bf16_to_f32_inl(ws->sg[b * I + i]);
            double u = ts__bf16_to_f32_inl(ws->su[b * I + i]);
            if (limit > 0) {
                g = g < limit ? g : limit;
                u = u < limit ? (u > -limit ? u : -limit) : limit;
            }
            ws->sh[b * I + i] = ts__f32_to_bf16_inl((float)(g / (1.0 + exp(-g)) * u));
        }
}

ts_status ts__model_moe(ts_model *m, int64_t L, int64_t n, const int32_t *tokens,
                        const uint16_t *a, uint16_t *out) {
    ts__ws *ws = m->ws;
    const ts_model_config *c = &m->cfg;
    const ts__layer *ly = &m->layers[L];
    const int64_t D = c->dim, E = c->n_routed_experts, K = c->n_activated_experts;
    const int64_t I = c->moe_inter_dim;
    const float limit = (float)c->swiglu_limit;
    ts__prof *pf = &m->prof;

    /* 1. gate */
    /* every section of the single-process path is idempotent (fresh outputs from unchanged
     * inputs: masked_m is cleared before it counts); the EP call is not (an exchange) */
    float *af = ws->xf;
    TS__PROF_SECTION(pf, TS__P_GATE, (double)E * D * 4, 2.0 * n * E * D,
        for (int64_t i = 0; i < n * D; i++) af[i] = ts__bf16_to_f32_inl(a[i]);
        ts__model_gemv_f32(af, n, D, ly->gate_w, E, D, ws->gs, E);
        for (int64_t b = 0; b < n; b++)
            ts__model_route(c, ws->gs + b * E, ly->gate_bias,
                            ly->hash ? ly->tid2eid + (int64_t)tokens[b] * K : NULL, E, K,
                            ws->sel + b * K, ws->selw + b * K));

    /* 2. routed experts: rows grouped by expert, M_max = n; on an EP model through Mega MoE
     * (model_ep_moe.c), which gives the same bits */
    const uint16_t *routed = NULL;
    if (m->ep_routed) {
        /* profiled there: the bytes and flops are those of this rank's experts */
        TS__RETURN_IF_ERROR(m->ep_routed(m, L, n, a, &routed));
    } else {
        float *roww = ws->act_f32; /* [E][n] routing weight per grouped row */
        const int64_t rec[3] = {1, 1, 32};
        ts_tensor mm = ts_tensor_1d(ws->masked_m, TS_I32, E);
        TS__PROF_SECTION(pf, TS__P_EXPERTS, 0, 0, {
            ts_tensor x = ts_tensor_2d((void *)a, TS_BF16, n, D);
            ts_tensor q = ts_tensor_2d(ws->x8, TS_E4M3, n, D);
            ts_tensor s = ts_tensor_2d(ws->x8sf, TS_F32, n, D / 32);
            TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp8(&x, true, 32, false, &q, &s));
        }
        memset(ws->masked_m, 0, (size_t)E * sizeof(int32_t));
        for (int64_t b = 0; b < n; b++)
            for (int64_t j = 0; j < K; j++) {
                const int64_t e = ws->sel[b * K + j];
                const int64_t sl = ws->masked_m[e]++;
                ws->slot[b * K + j] = (int32_t)sl;
                memcpy(ws->ga + (e * n + sl) * D, ws->x8 + b * D, (size_t)D);
                memcpy(ws->gasf + (e * n + sl) * (D / 32), ws->x8sf + b * (D / 32),
                       (size_t)(D / 32) * sizeof(float));
                roww[e * n + sl] = ws->selw[b * K + j];
            }
        {
            ts_tensor ga = ts_tensor_3d(ws->ga, TS_E4M3, E, n, D);
            ts_tensor gs = ts_tensor_3d(ws->gasf, TS_F32, E, n, D / 32);
            ts_tensor dg = ts_tensor_3d(ws->gate, TS_BF16, E, n, I);
            ts_tensor du = ts_tensor_3d(ws->up, TS_BF16, E, n, I);
            TS__RETURN_IF_ERROR(ts_m_grouped_fp8_fp4_gemm_masked_packed(
                &ga, &gs, ly->w1, &dg, &mm, n, rec, NULL, NULL, NULL, false));
            TS__RETURN_IF_ERROR(ts_m_grouped_fp8_fp4_gemm_masked_packed(
                &ga, &gs, ly->w3, &du, &mm, n, rec, NULL, NULL, NULL, false));
        });
        swiglu_ctx sc = {m, roww, limit, n};
        TS__PROF_SECTION(pf, TS__P_SWIGLU, 0, 0, ts__parallel_items(E, 1, routed_swiglu, &sc));
        int64_t used = 0;
        for (int64_t e = 0; e < E; e++) used += ws->masked_m[e] > 0;
        TS__PROF_SECTION(pf, TS__P_EXPERTS, (double)used * 3 * I * D * (0.5 + 1.0 / 32 * 4),
                         2.0 * 3 * n * K * I * D, {
            ts_tensor ha = ts_tensor_3d(ws->h8, TS_E4M3, E, n, I);
            ts_tensor hs = ts_tensor_3d(ws->h8sf, TS_F32, E, n, I / 32);
            ts_tensor dy = ts_tensor_3d(ws->ye, TS_BF16, E, n, D);
            TS__RETURN_IF_ERROR(ts_m_grouped_fp8_fp4_gemm_masked_packed(
                &ha, &hs, ly->w2, &dy, &mm, n, rec, NULL, NULL, NULL, false));
        });
    }

    /* 3. shared expert */
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->sw1, a, n, D, ws->sg, I));
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->sw3, a, n, D, ws->su, I));
    {
        swiglu_ctx sc = {m, NULL, limit, n};
        TS__PROF_SECTION(pf, TS__P_SWIGLU, 0, 0, ts__parallel_for(n, 1, shared_swiglu, &sc));
    }
    TS__RETURN_IF_ERROR(ts__model_lin8(ws, pf, &ly->sw2, ws->sh, n, I, ws->so, D));

    /* 4. routed (summed in f32 in top-k order from +0, as Mega MoE's combine) + shared */
    TS__PROF_SECTION(pf, TS__P_OTHER, 0, 0,
    for (int64_t b = 0; b < n; b++)
        for (int64_t d = 0; d < D; d++) {
            float r;
            if (routed) {
                r = ts__bf16_to_f32_inl(routed[b * D + d]);
            } else {
                float acc = 0.0f;
                for (int64_t j = 0; j < K; j++) {
                    const int64_t e = ws->sel[b * K + j], sl = ws->slot[b * K + j];
                    acc += ts__bf16_to_f32_inl(ws->ye[(e * n + sl) * D + d]);
                }
                r = ts__bf16_to_f32_inl(ts__f32_to_bf16_inl(acc));
            }
            out[b * D + d] = ts__f32_to_bf16_inl(r + ts__bf16_to_f32_inl(ws->so[b * D + d]));
        });
    return TS_OK;
}
