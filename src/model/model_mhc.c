/* Manifold-constrained hyper-connections (docs/model.md §4 "Block"): hc_pre with its Sinkhorn
 * mixing matrix, hc_post, the head collapse, and RMSNorm. Everything per row in f32 with a
 * fixed order; the mixes are an f32 GEMV (not ts_tf32_hc_prenorm_gemm, which truncates the
 * weights to TF32 where §4 keeps f32). */
#include "model_internal.h"

#include <math.h>
#include <string.h>

float ts__model_rms(const float *x, int64_t n, float eps) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * x[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i] * x[i];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    return 1.0f / sqrtf(s / (float)n + eps);
}

void ts__model_rmsnorm_bf16(const uint16_t *x, int64_t n, const float *w, float eps,
                            uint16_t *out) {
    float buf[8192];
    float *xf = n <= 8192 ? buf : (float *)malloc((size_t)n * sizeof(float));
    TS__ASSERT(xf);
    for (int64_t i = 0; i < n; i++) xf[i] = ts_bf16_to_f32(x[i]);
    const float r = ts__model_rms(xf, n, eps);
    for (int64_t i = 0; i < n; i++) out[i] = ts_f32_to_bf16(xf[i] * r * w[i]);
    if (xf != buf) free(xf);
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void ts__model_sinkhorn(float *M, int64_t hc, int64_t iters, float eps) {
    for (int64_t i = 0; i < hc; i++) {
        float *row = M + i * hc;
        float mx = row[0];
        for (int64_t j = 1; j < hc; j++) mx = row[j] > mx ? row[j] : mx;
        float s = 0;
        for (int64_t j = 0; j < hc; j++) {
            row[j] = expf(row[j] - mx);
            s += row[j];
        }
        for (int64_t j = 0; j < hc; j++) row[j] = row[j] / s + eps;
    }
    for (int64_t it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t i = 0; i < hc; i++) {
                float s = 0;
                for (int64_t j = 0; j < hc; j++) s += M[i * hc + j];
                const float d = s + eps;
                for (int64_t j = 0; j < hc; j++) M[i * hc + j] /= d;
            }
        for (int64_t j = 0; j < hc; j++) {
            float s = 0;
            for (int64_t i = 0; i < hc; i++) s += M[i * hc + j];
            const float d = s + eps;
            for (int64_t i = 0; i < hc; i++) M[i * hc + j] /= d;
        }
    }
}

/* xf = f32(X), mix = (xf · fnᵀ) · rms(xf) for every row. */
static void mixes(const ts_model *m, const uint16_t *X, int64_t n, const float *fn, int64_t nmix,
                  float *xf, float *mix) {
    const int64_t hd = m->cfg.hc_mult * m->cfg.dim;
    for (int64_t i = 0; i < n * hd; i++) xf[i] = ts_bf16_to_f32(X[i]);
    ts__model_gemv_f32(xf, n, hd, fn, nmix, hd, mix, nmix);
    const float eps = (float)m->cfg.norm_eps;
    for (int64_t b = 0; b < n; b++) {
        const float r = ts__model_rms(xf + b * hd, hd, eps);
        for (int64_t j = 0; j < nmix; j++) mix[b * nmix + j] *= r;
    }
}

/* y = bf16(Σ_s pre_s · x_s) */
static void collapse(const float *pre, const float *x, int64_t hc, int64_t D, uint16_t *y) {
    for (int64_t d = 0; d < D; d++) {
        float acc = pre[0] * x[d];
        for (int64_t s = 1; s < hc; s++) acc += pre[s] * x[s * D + d];
        y[d] = ts_f32_to_bf16(acc);
    }
}

void ts__model_hc_pre(const ts_model *m, const uint16_t *X, int64_t n, const float *fn,
                      const float *base, const float *scale, float *xf, float *mix,
                      uint16_t *y, float *post, float *comb) {
    const int64_t hc = m->cfg.hc_mult, D = m->cfg.dim, nmix = (2 + hc) * hc;
    const float eps = (float)m->cfg.hc_eps;
    mixes(m, X, n, fn, nmix, xf, mix);
    for (int64_t b = 0; b < n; b++) {
        const float *mx = mix + b * nmix;
        float pre[64];
        for (int64_t i = 0; i < hc; i++) {
            pre[i] = sigmoidf_(mx[i] * scale[0] + base[i]) + eps;
            post[b * hc + i] = 2.0f * sigmoidf_(mx[hc + i] * scale[1] + base[hc + i]);
        }
        float *C = comb + b * hc * hc;
        for (int64_t k = 0; k < hc * hc; k++) C[k] = mx[2 * hc + k] * scale[2] + base[2 * hc + k];
        ts__model_sinkhorn(C, hc, m->cfg.hc_sinkhorn_iters, eps);
        collapse(pre, xf + b * hc * D, hc, D, y + b * D);
    }
}

void ts__model_hc_post(const ts_model *m, const uint16_t *f, const uint16_t *X, int64_t n,
                       const float *post, const float *comb, uint16_t *Xout) {
    const int64_t hc = m->cfg.hc_mult, D = m->cfg.dim;
    for (int64_t b = 0; b < n; b++) {
        const uint16_t *Xb = X + b * hc * D;
        const float *C = comb + b * hc * hc;
        for (int64_t j = 0; j < hc; j++) {
            const float pj = post[b * hc + j];
            uint16_t *o = Xout + (b * hc + j) * D;
            for (int64_t d = 0; d < D; d++) {
                float s = C[j] * ts_bf16_to_f32(Xb[d]);
                for (int64_t i = 1; i < hc; i++) s += C[i * hc + j] * ts_bf16_to_f32(Xb[i * D + d]);
                o[d] = ts_f32_to_bf16(pj * ts_bf16_to_f32(f[b * D + d]) + s);
            }
        }
    }
}

void ts__model_hc_head(const ts_model *m, const uint16_t *X, int64_t n, float *xf, float *mix,
                       uint16_t *y) {
    const int64_t hc = m->cfg.hc_mult, D = m->cfg.dim;
    const float eps = (float)m->cfg.hc_eps;
    mixes(m, X, n, m->hc_head_fn, hc, xf, mix);
    for (int64_t b = 0; b < n; b++) {
        float pre[64];
        for (int64_t i = 0; i < hc; i++)
            pre[i] = sigmoidf_(mix[b * hc + i] * m->hc_head_scale[0] + m->hc_head_base[i]) + eps;
        collapse(pre, xf + b * hc * D, hc, D, y + b * D);
    }
}
