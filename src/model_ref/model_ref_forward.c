/* The float64 reference forward of docs/model.md §4: one token at a time, one sequence,
 * straightforward loops. Arithmetic between rounding points is float64; every rounding point
 * of the page is simulated exactly: bf16 (RNE of the value's f32 rounding), the activation and
 * weight quantisers (the public ts_per_token_cast_to_fp8 / _fp4), and the 584-byte MODEL1 cache
 * (written out here from docs/flash_mla.md's quantiser rule, no kernel). Clarity over speed. */
#include "model_ref/model_ref_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#define D_HEAD 512
#define D_NOPE 448
#define D_IDX 128
#define MAX_HEADS 4096

/* ---- rounding points ---------------------------------------------------------------- */

static double bf16r(double x) { return (double)ts_bf16_to_f32(ts_f32_to_bf16((float)x)); }

static void bf16v(double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = bf16r(x[i]);
}

/* Scratch for the quantiser calls (the reference allocates freely: it is not a hot path). */
typedef struct qbuf {
    float *x, *sf;
    uint8_t *q;
} qbuf;

static ts_status qbuf_make(qbuf *b, int64_t n, int64_t n_sf) {
    b->x = malloc((size_t)n * sizeof(float));
    b->q = malloc((size_t)n);
    b->sf = malloc((size_t)n_sf * sizeof(float));
    if (!b->x || !b->q || !b->sf) {
        free(b->x);
        free(b->q);
        free(b->sf);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
    }
    return TS_OK;
}

static void qbuf_free(qbuf *b) {
    free(b->x);
    free(b->q);
    free(b->sf);
}

/* ts_per_token_cast_to_fp8(row, ue8m0, gran) of the f32 rounding of x, dequantised into out. */
static ts_status fp8_act(const double *x, int64_t n, int64_t gran, double *out) {
    qbuf b;
    const int64_t nsf = ts__ceil_div(n, gran);
    TS__RETURN_IF_ERROR(qbuf_make(&b, n, nsf));
    for (int64_t i = 0; i < n; i++) b.x[i] = (float)x[i];
    ts_tensor tx = ts_tensor_2d(b.x, TS_F32, 1, n);
    ts_tensor tq = ts_tensor_2d(b.q, TS_E4M3, 1, n);
    ts_tensor ts = ts_tensor_2d(b.sf, TS_F32, 1, nsf);
    ts_status st = ts_per_token_cast_to_fp8(&tx, true, gran, false, &tq, &ts);
    if (st == TS_OK)
        for (int64_t i = 0; i < n; i++) out[i] = (double)ts_e4m3_to_f32(b.q[i]) * b.sf[i / gran];
    qbuf_free(&b);
    return st;
}

/* FP4 simulation (e2m1, ue8m0 per 32) of `rows` rows of width n, in place. */
static ts_status fp4_rows(double *x, int64_t rows, int64_t n) {
    qbuf b;
    TS__RETURN_IF_ERROR(qbuf_make(&b, rows * n, rows * (n / 32)));
    for (int64_t i = 0; i < rows * n; i++) b.x[i] = (float)x[i];
    ts_tensor tx = ts_tensor_2d(b.x, TS_F32, rows, n);
    ts_tensor tq = ts_tensor_2d(b.q, TS_E2M1X2, rows, n / 2);
    ts_tensor ts = ts_tensor_2d(b.sf, TS_F32, rows, n / 32);
    ts_status st = ts_per_token_cast_to_fp4(&tx, true, 32, false, TS__REF_FP4_ROUNDING, &tq, &ts);
    if (st == TS_OK)
        for (int64_t i = 0; i < rows * n; i++) {
            const uint8_t byte = b.q[i / 2];
            const uint8_t code = (i & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xF);
            x[i] = (double)ts_e2m1_to_f32(code) * b.sf[i / 32];
        }
    qbuf_free(&b);
    return st;
}

/* A 512-wide bf16 row through the MODEL1 cache and back: per 64 of the first 448 values
 * scale = 2^ceil(log2(max(amax / 448, 1e-4))), e4m3 = RNE(x / scale), decoded
 * bf16(e4m3 * scale); the 64 RoPE values are kept (already bf16). */
static void model1_roundtrip(const double *row, double *out) {
    for (int t = 0; t < D_NOPE / 64; t++) {
        double amax = 0;
        for (int i = 0; i < 64; i++) amax = fmax(amax, fabs(row[64 * t + i]));
        int e;
        const double m = frexp(fmax(amax / 448.0, 1e-4), &e); /* v = m * 2^e, m in [0.5, 1) */
        const double scale = ldexp(1.0, m == 0.5 ? e - 1 : e);
        for (int i = 0; i < 64; i++) {
            const uint8_t code = ts_f32_to_e4m3((float)(row[64 * t + i] / scale));
            out[64 * t + i] = bf16r((double)ts_e4m3_to_f32(code) * scale);
        }
    }
    for (int i = D_NOPE; i < D_HEAD; i++) out[i] = row[i];
}

/* ---- small helpers ------------------------------------------------------------------ */

static double rms(const double *x, int64_t n, double eps) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return 1.0 / sqrt(s / (double)n + eps);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* y[i] = sum_k W[row0 + i, k] x[k] for i < n */
static void matvec(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) {
        const double *w = W->v + (row0 + i) * W->cols;
        double s = 0;
        for (int64_t k = 0; k < W->cols; k++) s += w[k] * x[k];
        y[i] = s;
    }
}

/* lin8 (§3): x is a bf16 row of W->cols values; rows [row0, row0 + n) of W; y = bf16(W x8). */
static ts_status lin8(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x, double *y) {
    double *x8 = malloc((size_t)W->cols * sizeof(double));
    if (!x8) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
    ts_status st = fp8_act(x, W->cols, 128, x8);
    if (st == TS_OK) {
        matvec(W, row0, n, x8, y);
        bf16v(y, n);
    }
    free(x8);
    return st;
}

/* norm(y) = bf16(y * rms(y) * w), in place */
static void rmsnorm(double *y, int64_t n, const ts__ref_mat *w, double eps) {
    const double r = rms(y, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] = bf16r(y[i] * r * w->v[i]);
}

/* RoPE on a 64-value slice: pairs (2i, 2i+1) rotated by pos * freq_i, cos / sin rounded to f32 */
static void rope(double *x, double pos, const double *freqs, int inverse) {
    for (int i = 0; i < 32; i++) {
        const double theta = inverse ? -(pos * freqs[i]) : pos * freqs[i];
        const double c = (float)cos(theta), s = (float)sin(theta);
        const double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

static void rope_freqs(const ts_model_config *c, int compressed, double *freqs) {
    const double base = compressed ? c->compress_rope_theta : c->rope_theta;
    for (int i = 0; i < 32; i++) freqs[i] = pow(base, -2.0 * i / 64.0);
    if (!compressed) return;
    const double two_pi = 2.0 * 3.14159265358979323846;
    const double d_fast = 64.0 * log((double)c->original_seq_len / (two_pi * (double)c->beta_fast)) /
                          (2.0 * log(base));
    const double d_slow = 64.0 * log((double)c->original_seq_len / (two_pi * (double)c->beta_slow)) /
                          (2.0 * log(base));
    const double low = fmax(floor(d_fast), 0.0);
    double high = fmin(ceil(d_slow), 63.0);
    if (low == high) high += 0.001;
    for (int i = 0; i < 32; i++) {
        const double s = fmin(fmax((i - low) / (high - low), 0.0), 1.0);
        freqs[i] = freqs[i] / c->rope_factor * s + freqs[i] * (1.0 - s);
    }
}

/* y = H x / sqrt(128), Sylvester order: H[i][j] = (-1)^popcount(i & j) */
static void hadamard128(double *x) {
    double y[D_IDX];
    for (int i = 0; i < D_IDX; i++) {
        double s = 0;
        for (int j = 0; j < D_IDX; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1) ? -x[j] : x[j];
        y[i] = s / sqrt(128.0);
    }
    memcpy(x, y, sizeof(y));
}

/* ---- mHC -------------------------------------------------------------------------- */

typedef struct hc_mix {
    double pre[16], post[16], comb[16 * 16];
} hc_mix;

/* hc_pre: y = bf16(sum_s pre_s x_s) and the post / comb mixes. X: [hc, dim]. */
static void hc_pre(const ts_model_reference *r, const double *X, const ts__ref_mat *fn,
                   const ts__ref_mat *base, const ts__ref_mat *scale, double *y, hc_mix *mx) {
    const ts_model_config *c = &r->cfg;
    const int64_t hc = c->hc_mult, n = hc * c->dim, nm = (2 + hc) * hc;
    const double rr = rms(X, n, c->norm_eps), eps = c->hc_eps;
    double m[(2 + 16) * 16];
    matvec(fn, 0, nm, X, m);
    for (int64_t j = 0; j < nm; j++) m[j] *= rr;
    const double *b = base->v, *s = scale->v;
    for (int64_t i = 0; i < hc; i++) {
        mx->pre[i] = sigmoid(m[i] * s[0] + b[i]) + eps;
        mx->post[i] = 2.0 * sigmoid(m[hc + i] * s[1] + b[hc + i]);
    }
    double *C = mx->comb;
    for (int64_t i = 0; i < hc; i++) {
        double mmax = -INFINITY, sum = 0;
        for (int64_t j = 0; j < hc; j++) {
            C[i * hc + j] = m[2 * hc + i * hc + j] * s[2] + b[2 * hc + i * hc + j];
            mmax = fmax(mmax, C[i * hc + j]);
        }
        for (int64_t j = 0; j < hc; j++) sum += (C[i * hc + j] = exp(C[i * hc + j] - mmax));
        for (int64_t j = 0; j < hc; j++) C[i * hc + j] = C[i * hc + j] / sum + eps;
    }
    for (int64_t it = 0; it < c->hc_sinkhorn_iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < hc; i++) {
                double sum = 0;
                for (int64_t j = 0; j < hc; j++) sum += C[i * hc + j];
                for (int64_t j = 0; j < hc; j++) C[i * hc + j] /= sum + eps;
            }
        for (int64_t j = 0; j < hc; j++) {
            double sum = 0;
            for (int64_t i = 0; i < hc; i++) sum += C[i * hc + j];
            for (int64_t i = 0; i < hc; i++) C[i * hc + j] /= sum + eps;
        }
    }
    for (int64_t k = 0; k < c->dim; k++) {
        double acc = 0;
        for (int64_t sidx = 0; sidx < hc; sidx++) acc += mx->pre[sidx] * X[sidx * c->dim + k];
        y[k] = bf16r(acc);
    }
}

/* hc_post: X'_j = bf16(post_j f + sum_i comb_ij X_i), in place (Xn: [hc, dim] scratch) */
static void hc_post(const ts_model_reference *r, const double *f, const hc_mix *mx, double *X,
                    double *Xn) {
    const int64_t hc = r->cfg.hc_mult, D = r->cfg.dim;
    for (int64_t j = 0; j < hc; j++)
        for (int64_t k = 0; k < D; k++) {
            double acc = mx->post[j] * f[k];
            for (int64_t i = 0; i < hc; i++) acc += mx->comb[i * hc + j] * X[i * D + k];
            Xn[j * D + k] = bf16r(acc);
        }
    memcpy(X, Xn, (size_t)(hc * D) * sizeof(double));
}

/* ---- attention (§4 steps 1-6) ----------------------------------------------------- */

/* Compressor step 3: stores slot pos mod r; when the block completes, writes the pooled row
 * (width d, before its bf16 rounding) to row and returns 1. */
static int compressor_push(ts__ref_compressor *cs, const ts__ref_mat *wkv, const ts__ref_mat *wgate,
                           const ts__ref_mat *ape, const double *a, int64_t pos, double *row) {
    const int64_t w = cs->coff * cs->d, slot = pos % cs->r, d = cs->d;
    matvec(wkv, 0, w, a, cs->k + slot * w);
    matvec(wgate, 0, w, a, cs->g + slot * w);
    for (int64_t i = 0; i < w; i++) cs->g[slot * w + i] += ape->v[slot * w + i];
    if ((pos + 1) % cs->r != 0) return 0;
    for (int64_t ch = 0; ch < d; ch++) {
        /* softmax over the previous block's slots (channels [0, d)) and the current block's
         * (channels [d, 2d)) with overlap; the current block's channel ch without */
        const int64_t cur = cs->overlap ? d + ch : ch;
        const int use_prev = cs->overlap && cs->have_prev;
        double mmax = -INFINITY, den = 0, num = 0;
        for (int64_t j = 0; j < cs->r; j++) {
            mmax = fmax(mmax, cs->g[j * w + cur]);
            if (use_prev) mmax = fmax(mmax, cs->prev_g[j * w + ch]);
        }
        for (int64_t j = 0; j < cs->r; j++) {
            if (use_prev) {
                const double e = exp(cs->prev_g[j * w + ch] - mmax);
                den += e;
                num += e * cs->prev_k[j * w + ch];
            }
            const double e = exp(cs->g[j * w + cur] - mmax);
            den += e;
            num += e * cs->k[j * w + cur];
        }
        row[ch] = num / den;
    }
    if (cs->overlap) {
        memcpy(cs->prev_k, cs->k, (size_t)(cs->r * w) * sizeof(double));
        memcpy(cs->prev_g, cs->g, (size_t)(cs->r * w) * sizeof(double));
        cs->have_prev = 1;
    }
    return 1;
}

typedef struct idx_score {
    double s;
    int64_t t;
} idx_score;

static int idx_score_cmp(const void *pa, const void *pb) {
    const idx_score *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return a->t < b->t ? -1 : (a->t > b->t);
}

static ts_status attention(ts_model_reference *r, int64_t L, const double *a, double *f) {
    const ts_model_config *c = &r->cfg;
    ts__ref_layer *ly = &r->layers[L];
    const int64_t H = c->n_heads, QL = c->q_lora_rank, p = r->pos, win = c->window_size;
    const int32_t ratio = ly->ratio;
    const double eps = c->norm_eps;
    ts_status st = TS_OK;
    const int64_t ncomp = ratio > 0 ? (p + 1) / ratio : 0;
    double *qr = malloc((size_t)QL * sizeof(double));
    double *q = malloc((size_t)(H * D_HEAD) * sizeof(double));
    double *kv = malloc(D_HEAD * sizeof(double));
    double *row = malloc(2 * D_HEAD * sizeof(double));
    const int64_t nrows_max = win + ncomp;
    int64_t *sel = malloc((size_t)(ncomp + 1) * sizeof(int64_t));
    const double **rows = malloc((size_t)nrows_max * sizeof(double *));
    double *sc = malloc((size_t)nrows_max * sizeof(double));
    double *o = malloc((size_t)(H * D_HEAD) * sizeof(double));
    double *z = malloc((size_t)(c->o_groups * c->o_lora_rank) * sizeof(double));
    if (!qr || !q || !kv || !row || !sel || !rows || !sc || !o || !z) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
        goto done;
    }
    /* 1. query */
    if ((st = lin8(&ly->wq_a, 0, QL, a, qr)) != TS_OK) goto done;
    rmsnorm(qr, QL, &ly->q_norm, eps);
    if ((st = lin8(&ly->wq_b, 0, H * D_HEAD, qr, q)) != TS_OK) goto done;
    for (int64_t h = 0; h < H; h++) {
        double *qh = q + h * D_HEAD;
        const double rr = rms(qh, D_HEAD, eps);
        for (int i = 0; i < D_HEAD; i++) qh[i] *= rr;
        rope(qh + D_NOPE, (double)p, ly->freqs, 0);
    }
    bf16v(q, H * D_HEAD);
    /* 2. the window row */
    if ((st = lin8(&ly->wkv, 0, D_HEAD, a, kv)) != TS_OK) goto done;
    rmsnorm(kv, D_HEAD, &ly->kv_norm, eps);
    rope(kv + D_NOPE, (double)p, ly->freqs, 0);
    bf16v(kv + D_NOPE, D_HEAD - D_NOPE);
    model1_roundtrip(kv, ly->window + (p % win) * D_HEAD);
    /* 3. compressed row */
    if (ratio > 0 && compressor_push(&ly->comp_state, &ly->c_wkv, &ly->c_wgate, &ly->c_ape, a, p, row)) {
        bf16v(row, D_HEAD);
        rmsnorm(row, D_HEAD, &ly->c_norm, eps);
        rope(row + D_NOPE, (double)(p + 1 - ratio), ly->freqs, 0);
        bf16v(row + D_NOPE, D_HEAD - D_NOPE);
        model1_roundtrip(row, ly->comp + (p / ratio) * D_HEAD);
    }
    int64_t nsel = ncomp;
    for (int64_t t = 0; t < ncomp; t++) sel[t] = t;
    /* 4. indexer */
    if (ratio == 4) {
        const int64_t IH = c->index_n_heads;
        double *qi = malloc((size_t)(IH * D_IDX) * sizeof(double));
        idx_score *scores = malloc((size_t)(ncomp + 1) * sizeof(idx_score));
        double wh[MAX_HEADS];
        if (!qi || !scores) {
            free(qi);
            free(scores);
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
            goto done;
        }
        st = lin8(&ly->i_wq_b, 0, IH * D_IDX, qr, qi);
        for (int64_t h = 0; h < IH && st == TS_OK; h++) {
            rope(qi + h * D_IDX + 64, (double)p, ly->freqs, 0);
            hadamard128(qi + h * D_IDX);
        }
        if (st == TS_OK) st = fp4_rows(qi, IH, D_IDX);
        if (st == TS_OK &&
            compressor_push(&ly->index_state, &ly->ic_wkv, &ly->ic_wgate, &ly->ic_ape, a, p, row)) {
            bf16v(row, D_IDX);
            rmsnorm(row, D_IDX, &ly->ic_norm, eps);
            rope(row + 64, (double)(p + 1 - 4), ly->freqs, 0);
            hadamard128(row);
            st = fp4_rows(row, 1, D_IDX);
            memcpy(ly->index_keys + (p / 4) * D_IDX, row, D_IDX * sizeof(double));
        }
        if (st == TS_OK) {
            /* linbf: a is already bf16 */
            matvec(&ly->i_weights_proj, 0, IH, a, wh);
            for (int64_t h = 0; h < IH; h++) wh[h] *= (1.0 / sqrt(128.0)) * (1.0 / sqrt((double)IH));
            for (int64_t t = 0; t < ncomp; t++) {
                double s = 0;
                for (int64_t h = 0; h < IH; h++) {
                    double dot = 0;
                    for (int i = 0; i < D_IDX; i++) dot += qi[h * D_IDX + i] * ly->index_keys[t * D_IDX + i];
                    s += wh[h] * (dot > 0 ? dot : 0.0);
                }
                scores[t].s = s;
                scores[t].t = t;
            }
            qsort(scores, (size_t)ncomp, sizeof(idx_score), idx_score_cmp);
            nsel = ts__min64(c->index_topk, ncomp);
            for (int64_t i = 0; i < nsel; i++) sel[i] = scores[i].t;
        }
        free(qi);
        free(scores);
        if (st != TS_OK) goto done;
    }
    /* 5. sparse attention with the sink */
    int64_t nrows = 0;
    for (int64_t t = ts__max64(0, p - win + 1); t <= p; t++) rows[nrows++] = ly->window + (t % win) * D_HEAD;
    for (int64_t i = 0; i < nsel; i++) rows[nrows++] = ly->comp + sel[i] * D_HEAD;
    for (int64_t h = 0; h < H; h++) {
        const double *qh = q + h * D_HEAD;
        const double sink = ly->attn_sink.v[h];
        double mmax = sink, den = 0;
        for (int64_t t = 0; t < nrows; t++) {
            double s = 0;
            for (int i = 0; i < D_HEAD; i++) s += qh[i] * rows[t][i];
            sc[t] = s / sqrt((double)D_HEAD);
            mmax = fmax(mmax, sc[t]);
        }
        for (int64_t t = 0; t < nrows; t++) den += (sc[t] = exp(sc[t] - mmax));
        den += exp(sink - mmax);
        double *oh = o + h * D_HEAD;
        for (int i = 0; i < D_HEAD; i++) {
            double acc = 0;
            for (int64_t t = 0; t < nrows; t++) acc += sc[t] / den * rows[t][i];
            oh[i] = bf16r(acc);
        }
        rope(oh + D_NOPE, (double)p, ly->freqs, 1);
    }
    bf16v(o, H * D_HEAD);
    /* 6. grouped output projection */
    const int64_t hpg = H / c->o_groups, OL = c->o_lora_rank;
    for (int64_t g = 0; g < c->o_groups && st == TS_OK; g++)
        st = lin8(&ly->wo_a, g * OL, OL, o + g * hpg * D_HEAD, z + g * OL);
    if (st == TS_OK) st = lin8(&ly->wo_b, 0, c->dim, z, f);
done:
    free(qr);
    free(q);
    free(kv);
    free(row);
    free(sel);
    free(rows);
    free(sc);
    free(o);
    free(z);
    return st;
}

/* ---- MoE ------------------------------------------------------------------------- */

static double silu(double g) { return g / (1.0 + exp(-g)); }

static ts_status moe(ts_model_reference *r, int64_t L, const double *a, int32_t token, double *f) {
    const ts_model_config *c = &r->cfg;
    ts__ref_layer *ly = &r->layers[L];
    const int64_t E = c->n_routed_experts, K = c->n_activated_experts, I = c->moe_inter_dim;
    const int64_t D = c->dim;
    const double lim = c->swiglu_limit;
    ts_status st = TS_OK;
    double *s = malloc((size_t)E * sizeof(double));
    double *sigma = malloc((size_t)E * sizeof(double));
    int64_t *idx = malloc((size_t)E * sizeof(int64_t));
    double *x8 = malloc((size_t)D * sizeof(double));
    double *gate = malloc((size_t)I * sizeof(double));
    double *up = malloc((size_t)I * sizeof(double));
    double *act = malloc((size_t)I * sizeof(double));
    double *y = malloc((size_t)D * sizeof(double));
    double *routed = calloc((size_t)D, sizeof(double));
    if (!s || !sigma || !idx || !x8 || !gate || !up || !act || !y || !routed) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
        goto done;
    }
    /* 1. scores and selection */
    matvec(&ly->gate_w, 0, E, a, s);
    double smax = -INFINITY, ssum = 0;
    for (int64_t e = 0; e < E; e++) smax = fmax(smax, s[e]);
    for (int64_t e = 0; e < E; e++) {
        switch (c->score_func) {
        case TS_MODEL_SCORE_SIGMOID: sigma[e] = sigmoid(s[e]); break;
        case TS_MODEL_SCORE_SOFTMAX: ssum += (sigma[e] = exp(s[e] - smax)); break;
        default: sigma[e] = sqrt(log1p(exp(s[e]))); break;
        }
    }
    if (c->score_func == TS_MODEL_SCORE_SOFTMAX)
        for (int64_t e = 0; e < E; e++) sigma[e] /= ssum;
    if (L < c->n_hash_layers) {
        for (int64_t j = 0; j < K; j++) idx[j] = ly->tid2eid[(int64_t)token * K + j];
    } else {
        /* the K largest of sigma + bias, ties to the lower expert id */
        char *taken = calloc((size_t)E, 1);
        if (!taken) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
            goto done;
        }
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || sigma[e] + ly->gate_bias.v[e] >
                                                  sigma[best] + ly->gate_bias.v[best]))
                    best = e;
            taken[best] = 1;
            idx[j] = best;
        }
        free(taken);
    }
    double wsum = 0;
    for (int64_t j = 0; j < K; j++) wsum += sigma[idx[j]];
    /* 2. routed experts (MegaMoE math) */
    if ((st = fp8_act(a, D, 32, x8)) != TS_OK) goto done;
    for (int64_t j = 0; j < K; j++) {
        const int64_t e = idx[j];
        const double wj = c->score_func == TS_MODEL_SCORE_SOFTMAX
                              ? sigma[e] * c->route_scale
                              : sigma[e] / wsum * c->route_scale;
        matvec(&ly->w1[e], 0, I, x8, gate);
        matvec(&ly->w3[e], 0, I, x8, up);
        for (int64_t i = 0; i < I; i++) {
            double g = bf16r(gate[i]), u = bf16r(up[i]);
            if (lim > 0) {
                g = fmin(g, lim);
                u = fmin(fmax(u, -lim), lim);
            }
            act[i] = silu(g) * u * wj;
        }
        if ((st = fp8_act(act, I, 32, act)) != TS_OK) goto done;
        matvec(&ly->w2[e], 0, D, act, y);
        for (int64_t k = 0; k < D; k++) routed[k] += bf16r(y[k]);
    }
    bf16v(routed, D);
    /* 3. shared expert */
    if ((st = lin8(&ly->s_w1, 0, I, a, gate)) != TS_OK) goto done;
    if ((st = lin8(&ly->s_w3, 0, I, a, up)) != TS_OK) goto done;
    for (int64_t i = 0; i < I; i++) {
        double g = gate[i], u = up[i];
        if (lim > 0) {
            g = fmin(g, lim);
            u = fmin(fmax(u, -lim), lim);
        }
        act[i] = bf16r(silu(g) * u);
    }
    if ((st = lin8(&ly->s_w2, 0, D, act, y)) != TS_OK) goto done;
    /* 4. */
    for (int64_t k = 0; k < D; k++) f[k] = bf16r(routed[k] + y[k]);
done:
    free(s);
    free(sigma);
    free(idx);
    free(x8);
    free(gate);
    free(up);
    free(act);
    free(y);
    free(routed);
    return st;
}

/* ---- create / decode / free --------------------------------------------------------- */

static ts_status check_config(const ts_model_config *c) {
#define REQ(cond, key)                                                                     \
    do {                                                                                   \
        if (!(cond))                                                                       \
            return ts__fail(TS_ERR_INVALID_ARGUMENT,                                       \
                            "ts_model_reference_create: cfg->%s is invalid (needs %s)", key, \
                            #cond);                                                        \
    } while (0)
    REQ(c->attention == TS_MODEL_ATTN_V4 || c->attention == TS_MODEL_ATTN_V32, "attention");
    REQ(c->attention != TS_MODEL_ATTN_V32 || c->max_seq_len <= c->original_seq_len, "max_seq_len");
    REQ(c->head_dim == 512, "head_dim");
    REQ(c->rope_head_dim == 64, "rope_head_dim");
    REQ(c->index_head_dim == 128, "index_head_dim");
    REQ(c->vocab_size > 0, "vocab_size");
    REQ(c->dim > 0 && c->dim % 128 == 0, "dim");
    REQ(c->n_layers > 0 && c->n_layers <= TS_MODEL_MAX_LAYERS, "n_layers");
    REQ(c->n_hash_layers >= 0 && c->n_hash_layers <= c->n_layers, "n_hash_layers");
    REQ(c->q_lora_rank > 0 && c->q_lora_rank % 128 == 0, "q_lora_rank");
    REQ(c->o_lora_rank > 0 && c->o_lora_rank % 128 == 0, "o_lora_rank");
    REQ(c->moe_inter_dim > 0 && c->moe_inter_dim % 128 == 0, "moe_inter_dim");
    REQ(c->n_heads > 0 && c->n_heads <= MAX_HEADS, "n_heads");
    REQ(c->o_groups > 0 && c->n_heads % c->o_groups == 0, "o_groups");
    REQ(c->window_size > 0, "window_size");
    REQ(c->index_n_heads > 0 && c->index_n_heads <= MAX_HEADS, "index_n_heads");
    REQ(c->index_topk > 0, "index_topk");
    REQ(c->n_routed_experts > 0, "n_routed_experts");
    REQ(c->n_activated_experts > 0 && c->n_activated_experts <= c->n_routed_experts,
        "n_activated_experts");
    REQ(c->hc_mult > 0 && c->hc_mult <= 16, "hc_mult");
    REQ(c->hc_sinkhorn_iters >= 1, "hc_sinkhorn_iters");
    REQ(c->max_seq_len > 0, "max_seq_len");
    REQ(c->score_func >= TS_MODEL_SCORE_SQRTSOFTPLUS && c->score_func <= TS_MODEL_SCORE_SOFTMAX,
        "score_func");
    REQ(c->original_seq_len > 0 && c->beta_fast > 0 && c->beta_slow > 0, "original_seq_len");
    for (int64_t L = 0; L < c->n_layers; L++)
        REQ(c->compress_ratios[L] >= 0 && (c->compress_ratios[L] == 0 ||
                                           c->max_seq_len % c->compress_ratios[L] == 0),
            "compress_ratios");
#undef REQ
    return TS_OK;
}

static ts_status compressor_init(ts__ref_compressor *cs, int64_t d, int64_t r) {
    cs->d = d;
    cs->r = r;
    cs->overlap = r == 4;
    cs->coff = cs->overlap ? 2 : 1;
    const size_t n = (size_t)(r * cs->coff * d);
    cs->k = calloc(n, sizeof(double));
    cs->g = calloc(n, sizeof(double));
    if (cs->overlap) {
        cs->prev_k = calloc(n, sizeof(double));
        cs->prev_g = calloc(n, sizeof(double));
    }
    if (!cs->k || !cs->g || (cs->overlap && (!cs->prev_k || !cs->prev_g)))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: compressor state");
    return TS_OK;
}

static void compressor_free(ts__ref_compressor *cs) {
    free(cs->k);
    free(cs->g);
    free(cs->prev_k);
    free(cs->prev_g);
}

void ts_model_reference_free(ts_model_reference *r) {
    if (!r) return;
    if (r->layers)
        for (int64_t L = 0; L < r->cfg.n_layers; L++) {
            ts__ref_layer *ly = &r->layers[L];
            free(ly->window);
            free(ly->comp);
            free(ly->index_keys);
            free(ly->kv32);
            free(ly->ikeys);
            compressor_free(&ly->comp_state);
            compressor_free(&ly->index_state);
        }
    ts__ref_free_weights(r);
    free(r->layers);
    free(r);
}

ts_status ts_model_reference_create(const ts_model_config *cfg, ts_model_reference **out) {
    if (!cfg) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_reference_create: cfg is NULL");
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_reference_create: out is NULL");
    TS__RETURN_IF_ERROR(check_config(cfg));
    ts_model_reference *r = calloc(1, sizeof(*r));
    if (!r) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: model");
    r->cfg = *cfg;
    r->layers = calloc((size_t)cfg->n_layers, sizeof(ts__ref_layer));
    ts_status st = r->layers ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create");
    for (int64_t L = 0; L < cfg->n_layers && st == TS_OK; L++) {
        ts__ref_layer *ly = &r->layers[L];
        const bool v32 = cfg->attention == TS_MODEL_ATTN_V32;
        const int32_t ratio = v32 ? 0 : cfg->compress_ratios[L]; /* §8: ratios unused */
        ly->ratio = ratio;
        if (v32) {
            ly->kv32 = calloc((size_t)(cfg->max_seq_len * 576), sizeof(double));
            ly->ikeys = calloc((size_t)(cfg->max_seq_len * D_IDX), sizeof(double));
            if (!ly->kv32 || !ly->ikeys)
                st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: cache");
        }
        rope_freqs(cfg, ratio > 0, ly->freqs);
        ly->window = calloc((size_t)(cfg->window_size * D_HEAD), sizeof(double));
        if (!ly->window) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: cache");
        if (st == TS_OK && ratio > 0) {
            ly->comp = calloc((size_t)(cfg->max_seq_len / ratio * D_HEAD), sizeof(double));
            st = ly->comp ? compressor_init(&ly->comp_state, D_HEAD, ratio)
                          : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: cache");
        }
        if (st == TS_OK && ratio == 4) {
            ly->index_keys = calloc((size_t)(cfg->max_seq_len / 4 * D_IDX), sizeof(double));
            st = ly->index_keys ? compressor_init(&ly->index_state, D_IDX, 4)
                                : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: cache");
        }
    }
    if (st == TS_OK) st = ts__ref_generate_weights(r);
    if (st != TS_OK) {
        ts_model_reference_free(r);
        return st;
    }
    *out = r;
    return TS_OK;
}

/* Out-of-memory inside a step leaves the caches partly advanced; the reference is a test
 * oracle for small configs, so that is reported but not rolled back. */
ts_status ts_model_reference_decode(ts_model_reference *r, int32_t token, double *logits) {
    if (!r) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_reference_decode: r is NULL");
    if (!logits) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_reference_decode: logits is NULL");
    const ts_model_config *c = &r->cfg;
    if (token < 0 || token >= c->vocab_size)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_model_reference_decode: token = %d is outside [0, vocab_size = %lld)",
                        (int)token, (long long)c->vocab_size);
    if (r->pos >= c->max_seq_len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_model_reference_decode: the sequence is full (max_seq_len = %lld)",
                        (long long)c->max_seq_len);
    const int64_t hc = c->hc_mult, D = c->dim;
    double *X = malloc((size_t)(hc * D) * sizeof(double));
    double *y = malloc((size_t)D * sizeof(double));
    double *f = malloc((size_t)D * sizeof(double));
    double *Xn = malloc((size_t)(hc * D) * sizeof(double));
    ts_status st = (X && y && f && Xn) ? TS_OK
                                 : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_decode: scratch");
    if (st == TS_OK) {
        for (int64_t s = 0; s < hc; s++)
            memcpy(X + s * D, r->embed.v + (int64_t)token * D, (size_t)D * sizeof(double));
        hc_mix mx;
        for (int64_t L = 0; L < c->n_layers && st == TS_OK; L++) {
            ts__ref_layer *ly = &r->layers[L];
            hc_pre(r, X, &ly->hc_attn_fn, &ly->hc_attn_base, &ly->hc_attn_scale, y, &mx);
            rmsnorm(y, D, &ly->attn_norm, c->norm_eps);
            st = c->attention == TS_MODEL_ATTN_V32 ? ts__ref_attention_v32(r, L, y, f)
                                                   : attention(r, L, y, f);
            if (st != TS_OK) break;
            hc_post(r, f, &mx, X, Xn);
            hc_pre(r, X, &ly->hc_ffn_fn, &ly->hc_ffn_base, &ly->hc_ffn_scale, y, &mx);
            rmsnorm(y, D, &ly->ffn_norm, c->norm_eps);
            st = moe(r, L, y, token, f);
            if (st != TS_OK) break;
            hc_post(r, f, &mx, X, Xn);
        }
    }
    if (st == TS_OK) {
        /* head: pre-only collapse, final norm, bf16 LM head */
        double m[16];
        const double rr = rms(X, hc * D, c->norm_eps);
        matvec(&r->hc_head_fn, 0, hc, X, m);
        for (int64_t k = 0; k < D; k++) y[k] = 0;
        for (int64_t s = 0; s < hc; s++) {
            const double pre = sigmoid(m[s] * rr * r->hc_head_scale.v[0] + r->hc_head_base.v[s]) +
                               c->hc_eps;
            for (int64_t k = 0; k < D; k++) y[k] += pre * X[s * D + k];
        }
        bf16v(y, D);
        rmsnorm(y, D, &r->norm, c->norm_eps);
        matvec(&r->head, 0, c->vocab_size, y, logits);
        r->pos++;
    }
    free(X);
    free(y);
    free(f);
    free(Xn);
    return st;
}

/* ---- for model_ref_v32.c ------------------------------------------------------------ */

double ts__ref_bf16r(double x) { return bf16r(x); }
ts_status ts__ref_lin8(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x,
                       double *y) {
    return lin8(W, row0, n, x, y);
}
void ts__ref_rmsnorm(double *y, int64_t n, const ts__ref_mat *w, double eps) {
    rmsnorm(y, n, w, eps);
}
void ts__ref_matvec(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x, double *y) {
    matvec(W, row0, n, x, y);
}
void ts__ref_rope(double *x, double pos, const double *freqs, int inverse) {
    rope(x, pos, freqs, inverse);
}
void ts__ref_hadamard128(double *x) { hadamard128(x); }
ts_status ts__ref_fp8_act(const double *x, int64_t n, int64_t gran, double *out) {
    return fp8_act(x, n, gran, out);
}
