/* mHC's per-element double arithmetic (model_kernels.h), portable C: the reference order of
 * docs/model.md §4 "Block" that the AVX-512 kernels reproduce. */
#include "../../model_kernels.h"

#include "numerics/bf16_inline.h"

void ts__model_hc_post_cols__generic(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                     const double *post, const double *comb, int64_t j,
                                     int64_t d0, int64_t d1, uint16_t *o) {
    const double pj = post[j];
    for (int64_t d = d0; d < d1; d++) {
        double s = pj * ts__bf16_to_f32_inl(f[d]);
        for (int64_t i = 0; i < hc; i++) s += comb[i * hc + j] * ts__bf16_to_f32_inl(X[i * D + d]);
        o[d] = ts__f32_to_bf16_inl((float)s);
    }
}

void ts__model_hc_post_row__generic(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                    const double *post, const double *comb, uint16_t *out) {
    for (int64_t j = 0; j < hc; j++)
        ts__model_hc_post_cols__generic(f, X, hc, D, post, comb, j, 0, D, out + j * D);
}

void ts__model_collapse_cols__generic(const double *pre, const float *x, int64_t hc, int64_t D,
                                      int64_t d0, int64_t d1, uint16_t *y) {
    for (int64_t d = d0; d < d1; d++) {
        double acc = pre[0] * x[d];
        for (int64_t s = 1; s < hc; s++) acc += pre[s] * x[s * D + d];
        y[d] = ts__f32_to_bf16_inl((float)acc);
    }
}

void ts__model_collapse__generic(const double *pre, const float *x, int64_t hc, int64_t D,
                                 uint16_t *y) {
    ts__model_collapse_cols__generic(pre, x, hc, D, 0, D, y);
}
