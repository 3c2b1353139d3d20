/* The float64 reference of docs/model.md §8 (attention = v32): V3.2's MLA in absorbed form
 * with the lightning indexer, one token at a time, straightforward loops. Every rounding point
 * of §8 is simulated: bf16, the activation casts (the public ts_per_token_cast_to_fp8), and
 * the 656-byte cache (written out here from docs/flash_mla.md's quantiser rule, no kernel). */
#include "model_ref/model_ref_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tilestack/numerics.h"

#define NOPE 128
#define ROPE 64
#define QK 192
#define VD 128
#define LAT 512
#define DQK 576
#define IDX 128

/* A 576-wide row through the V32 cache and back: per 128 of the first 512 values
 * scale = 2^ceil(log2(max(amax / 448, 1e-4))), e4m3 = RNE(x / scale), value e4m3 * scale
 * (bf16-exact); the 64 RoPE values are kept (already bf16). */
static void v32_roundtrip(const double *row, double *out) {
    for (int t = 0; t < LAT / 128; t++) {
        double amax = 0;
        for (int i = 0; i < 128; i++) amax = fmax(amax, fabs(row[128 * t + i]));
        int e;
        const double m = frexp(fmax(amax / 448.0, 1e-4), &e);
        const double scale = ldexp(1.0, m == 0.5 ? e - 1 : e);
        for (int i = 0; i < 128; i++) {
            const uint8_t code = ts_f32_to_e4m3((float)(row[128 * t + i] / scale));
            out[128 * t + i] = ts__ref_bf16r((double)ts_e4m3_to_f32(code) * scale);
        }
    }
    for (int i = LAT; i < DQK; i++) out[i] = row[i];
}

/* The indexer's rotate-half RoPE on x[0..63]: pairs (i, i + 32), cos / sin rounded to f32. */
static void rope_half(double *x, double pos, const double *freqs) {
    for (int i = 0; i < 32; i++) {
        const double th = pos * freqs[i];
        const double c = (float)cos(th), s = (float)sin(th);
        const double a = x[i], b = x[i + 32];
        x[i] = a * c - b * s;
        x[i + 32] = a * s + b * c;
    }
}

/* RoPE (bf16), Hadamard (bf16), FP8 cast (ue8m0, one scale per 128) of one 128-row, in place. */
static ts_status index_row(double *x, double pos, const double *freqs) {
    rope_half(x, pos, freqs);
    for (int i = 0; i < ROPE; i++) x[i] = ts__ref_bf16r(x[i]);
    ts__ref_hadamard128(x);
    for (int i = 0; i < IDX; i++) x[i] = ts__ref_bf16r(x[i]);
    return ts__ref_fp8_act(x, IDX, 128, x);
}

typedef struct scored {
    double s;
    int64_t t;
} scored;

static int scored_cmp(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return a->t < b->t ? -1 : (a->t > b->t);
}

ts_status ts__ref_attention_v32(ts_model_reference *r, int64_t L, const double *a, double *f) {
    const ts_model_config *c = &r->cfg;
    ts__ref_layer *ly = &r->layers[L];
    const int64_t H = c->n_heads, QL = c->q_lora_rank, IH = c->index_n_heads, p = r->pos;
    const double eps = c->norm_eps, pos = (double)p;
    double *qr = malloc((size_t)QL * sizeof(double));
    double *q = malloc((size_t)(H * QK) * sizeof(double));
    double *qf = malloc((size_t)(H * DQK) * sizeof(double));
    double *kv = malloc(DQK * sizeof(double));
    double *qi = malloc((size_t)(IH * IDX) * sizeof(double));
    double *wh = malloc((size_t)IH * sizeof(double));
    scored *sc = malloc((size_t)(p + 1) * sizeof(scored));
    double *pr = malloc((size_t)(p + 1) * sizeof(double));
    double *ov = malloc((size_t)(H * VD) * sizeof(double));
    ts_status st = (qr && q && qf && kv && qi && wh && sc && pr && ov)
                       ? TS_OK
                       : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
    if (st != TS_OK) goto done;
    /* 1. q = wq_b(q_norm(wq_a(a))), heads of nope 128 + rope 64; q_pe rotated (bf16) */
    if ((st = ts__ref_lin8(&ly->wq_a, 0, QL, a, qr)) != TS_OK) goto done;
    ts__ref_rmsnorm(qr, QL, &ly->q_norm, eps);
    if ((st = ts__ref_lin8(&ly->wq_b, 0, H * QK, qr, q)) != TS_OK) goto done;
    for (int64_t h = 0; h < H; h++) {
        double *pe = q + h * QK + NOPE;
        ts__ref_rope(pe, pos, ly->freqs, 0);
        /* absorbed query: bf16(q_nope_h · W_UK_h) (W_UK_h = wkv_b rows h·256 .. h·256+127) */
        for (int64_t cc = 0; cc < LAT; cc++) {
            double s = 0;
            for (int d = 0; d < NOPE; d++) s += q[h * QK + d] * ly->wkv_b.v[(h * 256 + d) * LAT + cc];
            qf[h * DQK + cc] = ts__ref_bf16r(s);
        }
        for (int i = 0; i < ROPE; i++) qf[h * DQK + LAT + i] = ts__ref_bf16r(pe[i]);
    }
    /* 2. kv = wkv_a(a): latent (kv_norm) + rope (rotated, bf16), through the cache */
    if ((st = ts__ref_lin8(&ly->wkv_a, 0, DQK, a, kv)) != TS_OK) goto done;
    ts__ref_rmsnorm(kv, LAT, &ly->kv_norm, eps);
    ts__ref_rope(kv + LAT, pos, ly->freqs, 0);
    for (int i = LAT; i < DQK; i++) kv[i] = ts__ref_bf16r(kv[i]);
    v32_roundtrip(kv, ly->kv32 + p * DQK);
    /* 3. indexer */
    if ((st = ts__ref_lin8(&ly->i_wq_b, 0, IH * IDX, qr, qi)) != TS_OK) goto done;
    for (int64_t h = 0; h < IH && st == TS_OK; h++) st = index_row(qi + h * IDX, pos, ly->freqs);
    if (st != TS_OK) goto done;
    double *k = ly->ikeys + p * IDX;
    if ((st = ts__ref_lin8(&ly->i_wk, 0, IDX, a, k)) != TS_OK) goto done;
    {
        double mean = 0, var = 0;
        for (int i = 0; i < IDX; i++) mean += k[i];
        mean /= IDX;
        for (int i = 0; i < IDX; i++) var += (k[i] - mean) * (k[i] - mean);
        const double rstd = 1.0 / sqrt(var / IDX + eps);
        for (int i = 0; i < IDX; i++)
            k[i] = ts__ref_bf16r((k[i] - mean) * rstd * ly->i_k_norm.v[i] + ly->i_k_norm_bias.v[i]);
    }
    if ((st = index_row(k, pos, ly->freqs)) != TS_OK) goto done;
    ts__ref_matvec(&ly->i_weights_proj, 0, IH, a, wh); /* linbf: a is bf16 already */
    for (int64_t h = 0; h < IH; h++) wh[h] *= (1.0 / sqrt(128.0)) * (1.0 / sqrt((double)IH));
    for (int64_t t = 0; t <= p; t++) {
        double s = 0;
        for (int64_t h = 0; h < IH; h++) {
            double dot = 0;
            for (int i = 0; i < IDX; i++) dot += qi[h * IDX + i] * ly->ikeys[t * IDX + i];
            s += wh[h] * (dot > 0 ? dot : 0.0);
        }
        sc[t].s = s;
        sc[t].t = t;
    }
    qsort(sc, (size_t)(p + 1), sizeof(scored), scored_cmp);
    const int64_t nsel = ts__min64(c->index_topk, p + 1);
    /* 4. sparse MLA over the chosen rows (scale 192^-1/2), 5. W_UV, wo */
    for (int64_t h = 0; h < H; h++) {
        const double *qh = qf + h * DQK;
        double mmax = -INFINITY, den = 0;
        for (int64_t i = 0; i < nsel; i++) {
            const double *row = ly->kv32 + sc[i].t * DQK;
            double s = 0;
            for (int j = 0; j < DQK; j++) s += qh[j] * row[j];
            pr[i] = s / sqrt((double)QK);
            mmax = fmax(mmax, pr[i]);
        }
        for (int64_t i = 0; i < nsel; i++) den += (pr[i] = exp(pr[i] - mmax));
        double ol[LAT];
        for (int j = 0; j < LAT; j++) {
            double acc = 0;
            for (int64_t i = 0; i < nsel; i++) acc += pr[i] / den * ly->kv32[sc[i].t * DQK + j];
            ol[j] = ts__ref_bf16r(acc);
        }
        for (int vv = 0; vv < VD; vv++) {
            double s = 0;
            const double *w = ly->wkv_b.v + (h * 256 + NOPE + vv) * LAT;
            for (int j = 0; j < LAT; j++) s += w[j] * ol[j];
            ov[h * VD + vv] = ts__ref_bf16r(s);
        }
    }
    st = ts__ref_lin8(&ly->wo, 0, c->dim, ov, f);
done:
    free(qr);
    free(q);
    free(qf);
    free(kv);
    free(qi);
    free(wh);
    free(sc);
    free(pr);
    free(ov);
    return st;
}
