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

#endif
