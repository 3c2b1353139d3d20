/* Manifold-constrained hyper-connections (docs/model.md §4 "Block"): hc_pre with its Sinkhorn
 * mixing matrix, hc_post, the head collapse, and RMSNorm. Everything per row in f32 with a
 * fixed order; the mixes are an f32 GEMV (not ts_tf32_hc_prenorm_gemm, which truncates the
 * weights to TF32 where §4 keeps f32). */
#include "model_internal.h"
#include "model_kernels.h"

#include <math.h>
#include <string.h>

double ts__model_rms(const float *x, int64_t n, float eps) {
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += (double)x[i] * (double)x[i];
    const double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    return 1.0 / sqrt(s / (double)n + (double)eps);
}

void ts__model_rmsnorm_bf16(const uint16_t *x, int64_t n, const float *w, float eps,
                            uint16_t *out) {
    /* the same sum as ts__model_rms, read straight from bf16 */
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) {
            const double v = ts__bf16_to_f32_inl(x[i + l]);
            acc[l] += v * v;
        }
    for (int l = 0; i < n; i++, l++) {
        const double v = ts__bf16_to_f32_inl(x[i]);
        acc[l] += v * v;
    }
    const double r = 1.0 / sqrt(((acc[0] + acc[1]) + (acc[2] + acc[3])) / (double)n + (double)eps);
    for (i = 0; i < n; i++)
        out[i] = ts__f32_to_bf16_inl((float)((double)ts__bf16_to_f32_inl(x[i]) * r * (double)w[i]));
}

static inline double sigmoid_(double x) { return 1.0 / (1.0 + exp(-x)); }

void ts__model_sinkhorn(double *M, int64_t hc, int64_t iters, double eps) {
    for (int64_t i = 0; i < hc; i++) {
        double *row = M + i * hc;
        double mx = row[0];
        for (int64_t j = 1; j < hc; j++) mx = row[j] > mx ? row[j] : mx;
        double s = 0;
        for (int64_t j = 0; j < hc; j++) {
            row[j] = exp(row[j] - mx);
            s += row[j];
        }
        for (int64_t j = 0; j < hc; j++) row[j] = row[j] / s + eps;
    }
    for (int64_t it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < hc; i++) {
                double s = 0;
                for (int64_t j = 0; j < hc; j++) s += M[i * hc + j];
                const double d = s + eps;
                for (int64_t j = 0; j < hc; j++) M[i * hc + j] /= d;
            }
        for (int64_t j = 0; j < hc; j++) {
            double s = 0;
            for (int64_t i = 0; i < hc; i++) s += M[i * hc + j];
            const double d = s + eps;
            for (int64_t i = 0; i < hc; i++) M[i * hc + j] /= d;
        }
    }
}

/* xf = f32(X), mix = (xf · fnᵀ) · rms(xf) for every row. */
static void mixes(const ts_model *m, const uint16_t *X, int64_t n, const float *fn, int64_t nmix,
                  float *xf, float *mixf, double *mix) {
    const int64_t hd = m->cfg.hc_mult * m->cfg.dim;
    for (int64_t i = 0; i < n * hd; i++) xf[i] = ts__bf16_to_f32_inl(X[i]);
    ts__model_gemv_f32(xf, n, hd, fn, nmix, hd, mixf, nmix);
    const float eps = (float)m->cfg.norm_eps;
    for (int64_t b = 0; b < n; b++) {
        const double r = ts__model_rms(xf + b * hd, hd, eps);
        for (int64_t j = 0; j < nmix; j++) mix[b * nmix + j] = (double)mixf[b * nmix + j] * r;
    }
}

typedef void (*post_row_fn)(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                            const double *post, const double *comb, uint16_t *out);
typedef void (*collapse_fn)(const double *pre, const float *x, int64_t hc, int64_t D,
                            uint16_t *y);

/* The per-element kernels of the active ISA (model_kernels.h: the same bits on every path). */
static post_row_fn post_row_kernel(void) {
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) return ts__model_hc_post_row__avx512;
#endif
    return ts__model_hc_post_row__generic;
}

static collapse_fn collapse_kernel(void) {
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) return ts__model_collapse__avx512;
#endif
    return ts__model_collapse__generic;
}

typedef struct hc_ctx {
    const ts_model *m;
    const float *base, *scale, *xf;
    const double *mix;
    uint16_t *y;
    double *post, *comb;
    const uint16_t *f, *X;
    uint16_t *Xout;
    post_row_fn post_row;
    collapse_fn collapse;
} hc_ctx;

static void pre_rows(void *vctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const hc_ctx *c = (const hc_ctx *)vctx;
    const int64_t hc = c->m->cfg.hc_mult, D = c->m->cfg.dim, nmix = (2 + hc) * hc;
    const double eps = c->m->cfg.hc_eps;
    for (int64_t b = b0; b < b1; b++) {
        const double *mx = c->mix + b * nmix;
        double pre[64];
        for (int64_t i = 0; i < hc; i++) {
            pre[i] = sigmoid_(mx[i] * c->scale[0] + c->base[i]) + eps;
            c->post[b * hc + i] = 2.0 * sigmoid_(mx[hc + i] * c->scale[1] + c->base[hc + i]);
        }
        double *C = c->comb + b * hc * hc;
        for (int64_t k = 0; k < hc * hc; k++)
            C[k] = mx[2 * hc + k] * c->scale[2] + c->base[2 * hc + k];
        ts__model_sinkhorn(C, hc, c->m->cfg.hc_sinkhorn_iters, eps);
        c->collapse(pre, c->xf + b * hc * D, hc, D, c->y + b * D);
    }
}

void ts__model_hc_pre(const ts_model *m, const uint16_t *X, int64_t n, const float *fn,
                      const float *base, const float *scale, float *xf, float *mixf, double *mix,
                      uint16_t *y, double *post, double *comb) {
    const int64_t hc = m->cfg.hc_mult, nmix = (2 + hc) * hc;
    mixes(m, X, n, fn, nmix, xf, mixf, mix);
    hc_ctx c = {m, base, scale, xf, mix, y, post, comb, NULL, NULL, NULL, NULL, collapse_kernel()};
    ts__parallel_for(n, 1, pre_rows, &c);
}

static void post_rows(void *vctx, int64_t b0, int64_t b1, int tid) {
    (void)tid;
    const hc_ctx *c = (const hc_ctx *)vctx;
    const int64_t hc = c->m->cfg.hc_mult, D = c->m->cfg.dim;
    for (int64_t b = b0; b < b1; b++)
        c->post_row(c->f + b * D, c->X + b * hc * D, hc, D, c->post + b * hc, c->comb + b * hc * hc,
                    c->Xout + b * hc * D);
}

void ts__model_hc_post(const ts_model *m, const uint16_t *f, const uint16_t *X, int64_t n,
                       const double *post, const double *comb, uint16_t *Xout) {
    hc_ctx c = {m, NULL, NULL, NULL, NULL, NULL, (double *)post, (double *)comb, f, X, Xout,
                post_row_kernel(), NULL};
    ts__parallel_for(n, 1, post_rows, &c);
}

void ts__model_hc_head(const ts_model *m, const uint16_t *X, int64_t n, float *xf, float *mixf,
                       double *mix, uint16_t *y) {
    const int64_t hc = m->cfg.hc_mult, D = m->cfg.dim;
    const double eps = m->cfg.hc_eps;
    mixes(m, X, n, m->hc_head_fn, hc, xf, mixf, mix);
    for (int64_t b = 0; b < n; b++) {
        double pre[64];
        for (int64_t i = 0; i < hc; i++)
            pre[i] = sigmoid_(mix[b * hc + i] * m->hc_head_scale[0] + m->hc_head_base[i]) + eps;
        collapse_kernel()(pre, xf + b * hc * D, hc, D, y + b * D);
    }
}
