/* The model's own small kernels (generic C, AVX2 and AVX-512, the same bits). */
#ifndef TILESTACK_MODEL_KERNELS_H
#define TILESTACK_MODEL_KERNELS_H

#include <stdint.h>

/* y[r * ldy] = sum_i x[r * ldx + i] * w[i] for r < m: one f32 weight row against m rows in
 * f32, 16 lanes (lane i mod 16 by fma; the k % 16 tail into lanes 0..), reduced pairwise by
 * ts__model_dot_reduce16. (Double lanes were tried: the dsv4-tiny distance to the float64
 * reference moved by < 10%, at a quarter of the speed.) */
static inline float ts__model_dot_reduce16(const float a[16]) {
    float t[8];
    for (int i = 0; i < 8; i++) t[i] = a[i] + a[i + 8];
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}
typedef void (*ts__model_dot_rows_fn)(const float *w, int64_t k, const float *x, int64_t m,
                                      int64_t ldx, float *y, int64_t ldy);
void ts__model_dot_rows__generic(const float *w, int64_t k, const float *x, int64_t m,
                                 int64_t ldx, float *y, int64_t ldy);
#ifdef TS_HAVE_AVX2_KERNELS
void ts__model_dot_rows__avx2(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
void ts__model_dot_rows__avx512(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                                float *y, int64_t ldy);
/* The same for the four weight rows w, w + k, w + 2k, w + 3k: y[r * ldy + j] = row j against x
 * row r (the same bits as four ts__model_dot_rows__generic calls), blocked 4 x 4 for m >= 4. */
void ts__model_dot_4w__avx512(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy);
#endif

/* mHC (model_mhc.c), per row: hc_post's out[j][d] = bf16(post[j] · f[d] + Σ_i comb[i][j] ·
 * X[i][d]) for j < hc, d < D, and the collapse y[d] = bf16(Σ_s pre[s] · x[s][d]), in double
 * from the first term, products then sums left to right (no fma); the _cols forms do columns
 * d0 .. d1 - 1 only (hc_post: of row j, o = out + j · D). */
void ts__model_hc_post_cols__generic(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                     const double *post, const double *comb, int64_t j,
                                     int64_t d0, int64_t d1, uint16_t *o);
void ts__model_hc_post_row__generic(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                    const double *post, const double *comb, uint16_t *out);
void ts__model_collapse_cols__generic(const double *pre, const float *x, int64_t hc, int64_t D,
                                      int64_t d0, int64_t d1, uint16_t *y);
void ts__model_collapse__generic(const double *pre, const float *x, int64_t hc, int64_t D,
                                 uint16_t *y);
#ifdef TS_HAVE_AVX512_KERNELS
void ts__model_hc_post_row__avx512(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                   const double *post, const double *comb, uint16_t *out);
void ts__model_collapse__avx512(const double *pre, const float *x, int64_t hc, int64_t D,
                                uint16_t *y);
#endif

#endif
